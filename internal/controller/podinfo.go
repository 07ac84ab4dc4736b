package controller

import (
	"cmp"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcpbridge/operator/internal/bridge"
)

// podInfo is what a supervisor needs of its server's Pod: its address,
// whether it is Ready, and otherwise why not, in the kubelet's words, the
// way `kubectl describe` would show them: "ContainerCreating",
// "ImagePullBackOff: <message>", "CrashLoopBackOff: <message>",
// "Unschedulable: <message>", "Evicted: <message>", "Pending".
// See docs/design.md, "Pods that are not there yet".
func podInfo(pod *corev1.Pod) bridge.PodInfo {
	info := bridge.PodInfo{Name: pod.Name, UID: string(pod.UID), IP: pod.Status.PodIP}
	ready := podCondition(pod, corev1.PodReady)
	info.Ready = pod.Status.PodIP != "" && pod.Status.Phase == corev1.PodRunning &&
		ready != nil && ready.Status == corev1.ConditionTrue
	if !info.Ready {
		info.Waiting = waitingWords(pod)
	}
	return info
}

// waitingWords says why pod is not Ready, most telling reason first.
func waitingWords(pod *corev1.Pod) string {
	st := &pod.Status
	if st.Phase == corev1.PodFailed || st.Phase == corev1.PodSucceeded {
		return words(cmp.Or(st.Reason, string(st.Phase)), st.Message) // Evicted: The node was low on ...
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		return words(cmp.Or(c.Reason, "Unschedulable"), c.Message)
	}
	for _, cs := range st.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "PodInitializing" {
			return words(w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return words("Init:"+cmp.Or(t.Reason, "Error"), t.Message)
		}
	}
	for _, cs := range st.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return words(w.Reason, w.Message)
		}
	}
	for _, cs := range st.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return words(w.Reason, w.Message) // PodInitializing
		}
	}
	if c := podCondition(pod, corev1.PodReady); c != nil && c.Status != corev1.ConditionTrue && c.Reason != "" {
		return words(c.Reason, c.Message) // ContainersNotReady: containers with unready status: [server]
	}
	if st.PodIP == "" && st.Phase == corev1.PodRunning {
		return "Running without a Pod IP yet"
	}
	return cmp.Or(string(st.Phase), string(corev1.PodPending))
}

func words(reason, message string) string {
	if message == "" {
		return reason
	}
	return reason + ": " + message
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
