package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/internal/bridge"
)

// TestPodInfoSpeaksTheKubeletsWords: a Pod's state as the kubelet and the
// scheduler write it, turned into what the supervisor reports at stage pod.
func TestPodInfoSpeaksTheKubeletsWords(t *testing.T) {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	notReady := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
		Reason: "ContainersNotReady", Message: "containers with unready status: [server]"}
	waiting := func(name, reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	running := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	cases := []struct {
		name  string
		st    corev1.PodStatus
		ready bool
		words string
	}{
		{"ready", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7", Conditions: []corev1.PodCondition{ready}}, true, ""},
		{"ready without an IP", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{ready}},
			false, "Running without a Pod IP yet"},
		{"nothing known yet", corev1.PodStatus{}, false, "Pending"},
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, false, "Pending"},
		{"unschedulable", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}}},
			false, "Unschedulable: 0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."},
		{"sandbox being created", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{waiting("install-shim", "ContainerCreating", "")},
			ContainerStatuses:     []corev1.ContainerStatus{waiting("server", "PodInitializing", "")}},
			false, "ContainerCreating"},
		{"init container pulling", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{waiting("install-shim", "ImagePullBackOff", `Back-off pulling image "op:1"`)},
			ContainerStatuses:     []corev1.ContainerStatus{waiting("server", "PodInitializing", "")}},
			false, `ImagePullBackOff: Back-off pulling image "op:1"`},
		{"init container running", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{running("install-shim")},
			ContainerStatuses:     []corev1.ContainerStatus{waiting("server", "PodInitializing", "")}},
			false, "PodInitializing"},
		{"init container failed", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "install-shim", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "install: read-only file system"}}}}},
			false, "Init:Error: install: read-only file system"},
		{"image pull back-off", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "install-shim", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}},
			ContainerStatuses: []corev1.ContainerStatus{waiting("server", "ImagePullBackOff",
				`Back-off pulling image "ghcr.io/acme/none:1": ErrImagePull: not found`)}},
			false, `ImagePullBackOff: Back-off pulling image "ghcr.io/acme/none:1": ErrImagePull: not found`},
		{"crash loop", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{notReady},
			ContainerStatuses: []corev1.ContainerStatus{waiting("server", "CrashLoopBackOff",
				"back-off 10s restarting failed container=server pod=fx-mcp-1_ns(uid)")}},
			false, "CrashLoopBackOff: back-off 10s restarting failed container=server pod=fx-mcp-1_ns(uid)"},
		{"a missing Secret key", corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{waiting("server", "CreateContainerConfigError",
				`couldn't find key token in Secret ns/creds`)}},
			false, "CreateContainerConfigError: couldn't find key token in Secret ns/creds"},
		{"running, probe not passed yet", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7",
			Conditions: []corev1.PodCondition{notReady}, ContainerStatuses: []corev1.ContainerStatus{running("server")}},
			false, "ContainersNotReady: containers with unready status: [server]"},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted",
			Message: "The node was low on resource: memory."}, false, "Evicted: The node was low on resource: memory."},
		{"succeeded", corev1.PodStatus{Phase: corev1.PodSucceeded}, false, "Succeeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fx-mcp-1", UID: "uid-1"}, Status: tc.st}
			got := podInfo(pod)
			want := bridge.PodInfo{Name: "fx-mcp-1", UID: "uid-1", IP: tc.st.PodIP, Ready: tc.ready, Waiting: tc.words}
			if got != want {
				t.Errorf("podInfo = %+v, want %+v", got, want)
			}
		})
	}
}
