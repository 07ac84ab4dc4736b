package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testcluster"
)

// What config/default installs, with its namePrefix and namespace.
const (
	systemNS   = "mcpbridge-system"
	deployment = "mcpbridge-manager"
	leaseName  = "mcpbridge-manager.mcpbridge.dev"
	toolsNS    = "e2e-tools"
)

var _ = Describe("The operator deployed from config/default", Ordered, func() {
	var server *v1alpha1.McpServer

	It("installs with kubectl apply -k: the Deployment becomes Available, takes the lease and runs hardened", func(ctx SpecContext) {
		expectOverlayMatchesCluster(ctx)
		applied := time.Now()
		Expect(cluster.Kubectl(ctx, "apply", "--server-side", "-k", overlay)).Error().NotTo(HaveOccurred())
		Eventually(deploymentAvailable).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("apply -k -> Deployment Available", time.Since(applied).Round(time.Millisecond).String())

		pod := readyManagerPod(ctx)
		Eventually(leaseHolder).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(HavePrefix(pod.Name + "_"))
		expectHardened(pod)
		expectGoMemoryLimit(ctx, pod)
	})

	It("publishes a Streamable HTTP server Pod's tools and serves them through the gateway to a ServiceAccount", func(ctx SpecContext) {
		server = readyFixtureServer(ctx, toolsNS, "McpServer create -> Ready")

		token := agentToken(ctx, toolsNS, "agent")
		expectGatewayServes(ctx, readyManagerPod(ctx), toolsNS, token)
		expectGatewayRefusesAnonymous(ctx, readyManagerPod(ctx), toolsNS)
	})

	It("replaces a deleted manager Pod: Ready again at a higher connection generation, no process of the old Pod left", func(ctx SpecContext) {
		old := readyManagerPod(ctx)
		oldProcs, err := testcluster.PodProcesses(old.UID)
		Expect(err).NotTo(HaveOccurred())
		Expect(oldProcs).NotTo(BeEmpty(), "the manager Pod's processes are in its cgroup on the node")
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server)).To(Succeed())
		generation := server.Status.ConnectionGeneration

		deleted := time.Now()
		Expect(cluster.Client.Delete(ctx, old)).To(Succeed())
		Eventually(func(ctx context.Context) (metav1.Object, error) {
			return managerPod(ctx)
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(
			WithTransform(metav1.Object.GetUID, Not(Equal(old.UID))))
		Eventually(serverReady(server, generation+1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("manager Pod deleted -> McpServer Ready again", time.Since(deleted).Round(time.Millisecond).String())
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(old.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())

		replacement := readyManagerPod(ctx)
		// The replacement serves before it leads (every replica serves):
		// it takes the Lease once the old Pod has released it, or it expired.
		Eventually(leaseHolder).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(HavePrefix(replacement.Name + "_"))
		expectGatewayServes(ctx, replacement, toolsNS, agentToken(ctx, toolsNS, "agent"))
	})

	It("uninstalls with kubectl delete -k, and the McpServers go with the CRD", func(ctx SpecContext) {
		mgr := readyManagerPod(ctx)
		Expect(cluster.Kubectl(ctx, "delete", "-k", overlay, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())

		rendered := filepath.Join(GinkgoT().TempDir(), "rendered.yaml")
		out, err := cluster.Kubectl(ctx, "kustomize", overlay)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(rendered, []byte(out), 0o644)).To(Succeed())
		Eventually(func(ctx context.Context) (string, error) {
			return cluster.Kubectl(ctx, "get", "-f", rendered, "--ignore-not-found", "-o", "name")
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty(), "every object of config/default is gone")
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(mgr.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())

		// The CRD's deletion deleted its McpServers: the same CRD installed
		// again finds none.
		Expect(cluster.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(cluster.Root(), "config", "crd", "bases"))).Error().NotTo(HaveOccurred())
		Eventually(func(ctx context.Context) ([]v1alpha1.McpServer, error) {
			var list v1alpha1.McpServerList
			err := cluster.Client.List(ctx, &list)
			return list.Items, err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
		Expect(cluster.Kubectl(ctx, "delete", "-f", filepath.Join(cluster.Root(), "config", "crd", "bases"), "--wait=true")).Error().NotTo(HaveOccurred())
	})
})

// expectOverlayMatchesCluster checks that test/e2e/config points the manager
// at this cluster's apiserver.
func expectOverlayMatchesCluster(ctx context.Context) {
	out, err := cluster.Kubectl(ctx, "kustomize", overlay)
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(ContainSubstring(fmt.Sprintf("value: %s", cluster.NodeIP)), "KUBERNETES_SERVICE_HOST")
	Expect(out).To(ContainSubstring(fmt.Sprintf("value: \"%d\"", testcluster.APIServerPort)), "KUBERNETES_SERVICE_PORT")
	Expect(out).To(ContainSubstring("image: " + managerImage))
	Expect(out).To(ContainSubstring("--shim-image="+managerImage), "the servers' Pods copy the shim from the manager's image")
	// The manager runs config/default's egress policy, allowing nothing
	// extra: the Pod runtime's specs show that its tunnels to the servers'
	// Pods are not refused by it (see docs/design.md, "Egress policy").
	Expect(out).NotTo(ContainSubstring("--upstream-allow-cidrs"), "the e2e manager keeps the default egress policy")
}

func deploymentAvailable(ctx context.Context) error {
	return deploymentAvailableAt(ctx, client.ObjectKey{Namespace: systemNS, Name: deployment})
}

// deploymentAvailableAt passes once the manager Deployment key is Available
// with every replica it asks for Ready and no other.
func deploymentAvailableAt(ctx context.Context, key client.ObjectKey) error {
	var d appsv1.Deployment
	if err := cluster.Client.Get(ctx, key, &d); err != nil {
		return err
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue &&
			d.Status.ReadyReplicas == want && d.Status.Replicas == want {
			return nil
		}
	}
	return fmt.Errorf("deployment %s not Available: %+v", key, d.Status)
}

func leaseHolder(ctx context.Context) (string, error) {
	return leaseHolderIn(ctx, systemNS)
}

// leaseHolderIn returns who holds the manager's leader election Lease in ns.
func leaseHolderIn(ctx context.Context, ns string) (string, error) {
	var l coordinationv1.Lease
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, &l); err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// managerPod returns the one Ready, not terminating manager Pod.
func managerPod(ctx context.Context) (*corev1.Pod, error) {
	return managerPodIn(ctx, systemNS)
}

// managerPodIn returns the one Ready, not terminating manager Pod in ns.
func managerPodIn(ctx context.Context, ns string) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := cluster.Client.List(ctx, &pods, client.InNamespace(ns),
		client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
		return nil, err
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) != 1 {
		return nil, fmt.Errorf("%d Ready manager Pods of %d", len(ready), len(pods.Items))
	}
	return ready[0], nil
}

func readyManagerPod(ctx context.Context) *corev1.Pod {
	return readyManagerPodIn(ctx, systemNS)
}

func readyManagerPodIn(ctx context.Context, ns string) *corev1.Pod {
	var pod *corev1.Pod
	Eventually(func(ctx context.Context) (err error) {
		pod, err = managerPodIn(ctx, ns)
		return err
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	return pod
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// expectHardened checks the Dockerfile's promises on the node's processes:
// tini and the manager run as 65532 on a read-only root filesystem.
func expectHardened(pod *corev1.Pod) {
	pids, err := testcluster.PodProcesses(pod.UID)
	Expect(err).NotTo(HaveOccurred())
	seen := map[string]bool{}
	for _, pid := range pids {
		comm := strings.TrimSpace(readProc(pid, "comm"))
		if comm != "tini" && comm != "manager" {
			continue // the Pod's sandbox (pause)
		}
		seen[comm] = true
		Expect(procUIDs(pid)).To(HaveEach("65532"), "%s (pid %d) runs as nonroot", comm, pid)
		Expect(rootMountOptions(pid)).To(ContainElement("ro"), "%s (pid %d) has a read-only root filesystem", comm, pid)
	}
	Expect(seen).To(HaveKey("tini"))
	Expect(seen).To(HaveKey("manager"))
}

// expectGoMemoryLimit: the manager set its Go memory limit from its
// container's (512Mi in config/default), which it logs once at start.
func expectGoMemoryLimit(ctx context.Context, pod *corev1.Pod) {
	logs, err := cluster.Kubectl(ctx, "logs", "-n", pod.Namespace, pod.Name, "-c", "manager")
	Expect(err).NotTo(HaveOccurred())
	Expect(logs).To(MatchRegexp(`Go memory limit set below the container's.*"containerLimit": ?536870912`),
		"the manager read its container's memory limit")
}

func readProc(pid int, file string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// procUIDs returns the real, effective, saved and filesystem user ids.
func procUIDs(pid int) []string {
	for _, line := range strings.Split(readProc(pid, "status"), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
			return f[1:]
		}
	}
	Fail(fmt.Sprintf("no Uid line in /proc/%d/status", pid))
	return nil
}

// rootMountOptions are the mount options of the process's "/".
func rootMountOptions(pid int) []string {
	for _, line := range strings.Split(readProc(pid, "mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
			return strings.Split(f[5], ",")
		}
	}
	Fail(fmt.Sprintf("no / in /proc/%d/mountinfo", pid))
	return nil
}

// serverReady passes once the McpServer is Ready with the fixture's tools at
// connection generation minGeneration or later.
func serverReady(s *v1alpha1.McpServer, minGeneration int64) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		st := s.Status
		ready := meta.IsStatusConditionTrue(st.Conditions, "Ready")
		if !ready || st.Phase != v1alpha1.PhaseReady || st.ConnectionGeneration < minGeneration || st.ToolCount == 0 {
			return fmt.Errorf("McpServer %s: phase %s, generation %d (want >= %d), %d tools, last error %+v",
				s.Name, st.Phase, st.ConnectionGeneration, minGeneration, st.ToolCount, st.LastError)
		}
		return nil
	}
}
