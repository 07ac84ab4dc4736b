package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/testcluster"
)

// podsNS runs the stdio servers of the Pod runtime specs, under Pod Security
// "restricted": the defaults of the server's Pod must pass it.
const podsNS = "e2e-pods"

// fixtureCommand is the fixture's path in its image.
const fixtureCommand = "/mcp-fixture"

// The Pod runtime as config/default deploys it: no namespace may run Local,
// so every stdio McpServer runs in a Pod of its own, with the shim copied
// from the operator's image as its entrypoint and the server as the shim's
// child. The specs look at the node's processes themselves.
// See docs/design.md, "Runtimes for stdio servers".
var _ = Describe("The Pod runtime on a real node", Ordered, func() {
	var server *v1alpha1.McpServer

	BeforeAll(func(ctx SpecContext) {
		install(ctx)
		DeferCleanup(uninstall)
		Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNS,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(cluster.Kubectl(ctx, "delete", "namespace", podsNS, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
		})
	}, NodeTimeout(5*time.Minute))

	It("runs a stdio server in a Pod of its own: Ready with its tools, the server a child of the shim there and not of the manager", func(ctx SpecContext) {
		server = podServer("fixture")
		created := time.Now()
		Expect(cluster.Client.Create(ctx, server)).To(Succeed())
		Eventually(serverReady(server, 1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("stdio McpServer create -> Ready in its Pod", time.Since(created).Round(time.Millisecond).String())
		Expect(server.Status.Runtime).To(Equal(v1alpha1.RuntimePod))
		pod := serverPod(ctx, server)
		Expect(strings.HasPrefix(pod.Status.PodIP, "10.244.")).To(BeTrue(), "the server runs on the Pod network")

		shim, child := shimAndServer(pod)
		Expect(ppidOf(child)).To(Equal(shim), "the server is the shim's child")
		Expect(procUIDs(child)).To(HaveEach("65532"), "the server runs as nonroot")
		expectNoChildOfTheManager(ctx)
		expectGatewayServes(ctx, readyManagerPod(ctx), podsNS, agentToken(ctx, podsNS, "agent"))

		// The manager connected over TLS with its NetworkPolicy in place: this
		// node does not enforce NetworkPolicies, so the object's content is
		// what can be checked here (see docs/design.md, "The shim and the
		// tunnel").
		np := &networkingv1.NetworkPolicy{}
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: podsNS, Name: podruntime.DeploymentName(server.Name)}, np)).To(Succeed())
		Expect(np.Spec.PodSelector.MatchLabels).To(Equal(podruntime.Labels(server.Name)))
		Expect(np.Spec.Ingress).To(HaveLen(1))
		Expect(np.Spec.Ingress[0].From).To(HaveLen(1))
		Expect(np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": systemNS}))
		manager := readyManagerPod(ctx)
		for k, v := range np.Spec.Ingress[0].From[0].PodSelector.MatchLabels {
			Expect(manager.Labels).To(HaveKeyWithValue(k, v), "the NetworkPolicy admits the manager's own Pod")
		}
	})

	It("reconnects at the next generation with identical tools when the server process is killed inside its Pod", func(ctx SpecContext) {
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server)).To(Succeed())
		before := server.DeepCopy()
		pod := serverPod(ctx, server)
		_, child := shimAndServer(pod)

		killed := time.Now()
		Expect(syscall.Kill(child, syscall.SIGKILL)).To(Succeed())
		Eventually(serverReady(server, before.Status.ConnectionGeneration+1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("server process killed in its Pod -> Ready again", time.Since(killed).Round(time.Millisecond).String())
		Expect(server.Status.Tools).To(Equal(before.Status.Tools))
		Expect(server.Status.PodName).To(Equal(pod.Name), "the same Pod: the shim starts a fresh server")
		_, again := shimAndServer(pod)
		Expect(again).NotTo(Equal(child))
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "the container never restarted")
	})

	It("recovers from a deleted Pod: its replacement is dialled, with identical tools", func(ctx SpecContext) {
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server)).To(Succeed())
		before := server.DeepCopy()
		old := serverPod(ctx, server)

		deleted := time.Now()
		Expect(cluster.Client.Delete(ctx, old)).To(Succeed())
		Eventually(func(ctx context.Context) error {
			if err := serverReady(server, before.Status.ConnectionGeneration+1)(ctx); err != nil {
				return err
			}
			if server.Status.PodName == old.Name {
				return fmt.Errorf("still the deleted Pod %s", old.Name)
			}
			return nil
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("server Pod deleted -> Ready again in its replacement", time.Since(deleted).Round(time.Millisecond).String())
		Expect(server.Status.Tools).To(Equal(before.Status.Tools))
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(old.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
	})

	It("rolls the Pod on a spec edit, and never runs two server processes at once", func(ctx SpecContext) {
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server)).To(Succeed())
		before := server.DeepCopy()
		old := serverPod(ctx, server)
		oldCreds := tokenSecret(ctx, server)
		w := watchServers("--server-name=fixture")

		server.Spec.Stdio.Args = append(server.Spec.Stdio.Args, "--server-version=2.0.0")
		Expect(cluster.Client.Update(ctx, server)).To(Succeed())
		Eventually(func(ctx context.Context) error {
			if err := serverReady(server, before.Status.ConnectionGeneration+1)(ctx); err != nil {
				return err
			}
			if server.Status.PodName == old.Name || server.Status.ServerInfo == nil || server.Status.ServerInfo.Version != "2.0.0" {
				return fmt.Errorf("not yet the new Pod's server: pod %s, info %+v", server.Status.PodName, server.Status.ServerInfo)
			}
			return nil
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		maxAlive, distinct := w.stop()
		Expect(distinct).To(BeNumerically(">=", 2), "the watch saw the old and the new server")
		Expect(maxAlive).To(Equal(1), "two server processes of one McpServer existed at once")
		Expect(server.Status.Tools).To(Equal(before.Status.Tools))
		newCreds := tokenSecret(ctx, server)
		for _, key := range []string{podruntime.TokenKey, podruntime.CertKey, podruntime.PrivateKeyKey} {
			Expect(newCreds.Data[key]).NotTo(Equal(oldCreds.Data[key]), "the roll renews %s", key)
		}
	})

	It("gives a rotated Secret to the new Pod", func(ctx SpecContext) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: podsNS},
			StringData: map[string]string{"token": "first-value"}}
		Expect(cluster.Client.Create(ctx, secret)).To(Succeed())
		s := podServer("secretful")
		s.Spec.Stdio.Env = []corev1.EnvVar{{Name: "API_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}
		Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		Eventually(serverReady(s, 1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		_, child := shimAndServer(serverPod(ctx, s))
		Expect(environ(child)).To(ContainElement("API_TOKEN=first-value"))
		Expect(deploymentYAML(ctx, s)).NotTo(ContainSubstring("first-value"), "the Deployment references the Secret, never its value")

		first := s.Status.PodName
		secret.StringData = map[string]string{"token": "second-value"}
		Expect(cluster.Client.Update(ctx, secret)).To(Succeed())
		Eventually(func(ctx context.Context) error {
			if err := serverReady(s, 2)(ctx); err != nil {
				return err
			}
			if s.Status.PodName == first {
				return fmt.Errorf("still the first Pod")
			}
			return nil
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		_, child = shimAndServer(serverPod(ctx, s))
		Expect(environ(child)).To(ContainElement("API_TOKEN=second-value"))
		Expect(cluster.Client.Delete(ctx, s)).To(Succeed())
	})

	It("shows ImagePullBackOff in status at stage pod without burning attempts, until the wait's budget", func(ctx SpecContext) {
		s := podServer("nopull")
		// Pulled, from a registry that does not exist (the sandbox has no
		// network at all).
		s.Spec.Stdio.Image, s.Spec.Stdio.ImagePullPolicy = "mcpbridge.dev/e2e/does-not-exist:1", corev1.PullIfNotPresent
		s.Spec.ConnectionTimeoutMs = ptr32(20000)
		s.Spec.Reconnect.MaxAttempts = ptr32(2)
		Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		Eventually(func(ctx context.Context) (string, error) {
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
			return lastError(s), err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(MatchRegexp(`^pod: (ImagePullBackOff|ErrImagePull): `))
		Expect(s.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
		Expect(s.Status.FailedAttempts).To(BeZero())
		Expect(s.Status.PodName).NotTo(BeEmpty())

		Eventually(func(ctx context.Context) (v1alpha1.Phase, error) {
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
			return s.Status.Phase, err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Equal(v1alpha1.PhaseFailed))
		Expect(s.Status.FailedAttempts).To(BeEquivalentTo(2))
		Expect(readyCondition(s).Reason).To(Equal(v1alpha1.ReasonReconnectExhausted))
		Expect(lastError(s)).To(MatchRegexp(`^pod: the server's Pod was not Ready after 20000ms \(connectionTimeoutMs\): (ImagePullBackOff|ErrImagePull): `))
		Expect(cluster.Client.Delete(ctx, s)).To(Succeed())
	})

	It("runs a stdio server without an image in its own Pod where the namespace may not run Local, never as a child of the manager", func(ctx SpecContext) {
		s := podServer("npx")
		s.Spec.Stdio.Image, s.Spec.Stdio.Command, s.Spec.Stdio.Args = "", "npx", []string{"-y", "@modelcontextprotocol/server-everything"}
		Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		Eventually(func(ctx context.Context) (string, error) {
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
			return string(s.Status.Runtime) + " " + lastError(s), err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(HavePrefix("Pod pod: "))
		var d appsv1.Deployment
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: podsNS, Name: podruntime.DeploymentName("npx")}, &d)).To(Succeed())
		Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(policy.DefaultNodeImage))
		expectNoChildOfTheManager(ctx)
		Expect(cluster.Client.Delete(ctx, s)).To(Succeed())

		bare := podServer("bare")
		bare.Spec.Stdio.Image = ""
		Expect(cluster.Client.Create(ctx, bare)).To(Succeed())
		Eventually(func(ctx context.Context) (string, error) {
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(bare), bare)
			return readyCondition(bare).Reason + ": " + readyCondition(bare).Message, err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(And(HavePrefix(v1alpha1.ReasonInvalidSpec), ContainSubstring("spec.stdio.image")))
		expectNoChildOfTheManager(ctx)
		Expect(cluster.Client.Delete(ctx, bare)).To(Succeed())
	})

	DescribeTable("says what is wrong with a server that cannot run, and crashes nothing",
		func(ctx SpecContext, name string, mutate func(*v1alpha1.McpServer), want string) {
			s := podServer(name)
			s.Spec.Reconnect.MaxAttempts = ptr32(3)
			mutate(s)
			Expect(cluster.Client.Create(ctx, s)).To(Succeed())
			Eventually(func(ctx context.Context) (string, error) {
				err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
				return lastError(s), err
			}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(MatchRegexp(want))
			Expect(s.Status.Phase).NotTo(Equal(v1alpha1.PhaseReady))
			expectNothingRestarted(ctx, s)
			Expect(cluster.Client.Delete(ctx, s)).To(Succeed())
		},
		Entry("a command that is not in the image", "notfound", func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Command = "/no-such-server"
		}, `^transport-start: Pod \S+: the shim could not start the server process: .*no such file or directory`),
		Entry("a command that is not executable", "notexec", func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Command = "/etc/passwd"
		}, `^transport-start: Pod \S+: the shim could not start the server process: .*permission denied`),
		Entry("a command that exits at once", "exits", func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Args = []string{"--no-such-flag"}
		}, `^initialize: the server process exited: exit status 2 \(Pod \S+\)`),
		Entry("a Pod that cannot be scheduled", "unschedulable", func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("10000Gi")}}
		}, `^pod: Unschedulable: 0/1 nodes are available: .*Insufficient memory`),
	)

	It("survives a server that writes invalid JSON, and is Ready with it again", func(ctx SpecContext) {
		s := podServer("garbage")
		s.Spec.Stdio.Args = append(s.Spec.Stdio.Args, "--invalid-json-after=2s")
		Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		Eventually(serverReady(s, 1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		// Past the garbage line, which the fixture writes 2 s after it
		// starts: never Failed, nothing restarted.
		Consistently(func(ctx context.Context) (v1alpha1.Phase, error) {
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
			return s.Status.Phase, err
		}).WithContext(ctx).Within(5 * time.Second).ProbeEvery(poll).Should(BeElementOf(v1alpha1.PhaseReady, v1alpha1.PhaseReconnecting))
		Eventually(serverReady(s, 1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		expectNothingRestarted(ctx, s)
		Expect(cluster.Client.Delete(ctx, s)).To(Succeed())
	})

	It("removes the Deployment, the Pod and the token Secret with the McpServer", func(ctx SpecContext) {
		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server)).To(Succeed())
		pod := serverPod(ctx, server)
		Expect(cluster.Client.Delete(ctx, server)).To(Succeed())
		Eventually(func(ctx context.Context) ([]string, error) {
			return leftovers(ctx, "fixture")
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(pod.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
	})
})

// install applies the overlay and waits for a leading manager.
func install(ctx context.Context) {
	Expect(cluster.Kubectl(ctx, "apply", "--server-side", "-k", overlay)).Error().NotTo(HaveOccurred())
	Eventually(deploymentAvailable).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	pod := readyManagerPod(ctx)
	Eventually(leaseHolder).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(HavePrefix(pod.Name + "_"))
}

// uninstall deletes what install applied, the CRD and its McpServers too.
func uninstall(ctx SpecContext) {
	Expect(cluster.Kubectl(ctx, "delete", "-k", overlay, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
}

// podServer is the fixture in its image, a stdio server of the Pod runtime
// named name in podsNS.
func podServer(name string) *v1alpha1.McpServer {
	return &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podsNS},
		Spec: v1alpha1.McpServerSpec{
			Transport: v1alpha1.TransportStdio,
			Stdio: &v1alpha1.StdioTransport{Command: fixtureCommand, Args: []string{"--server-name=" + name},
				Image: fixtureImage, ImagePullPolicy: corev1.PullNever},
			Reconnect: &v1alpha1.ReconnectPolicy{InitialDelayMs: ptr32(200), MaxDelayMs: ptr32(2000), MaxAttempts: ptr32(10)},
		},
	}
}

func ptr32(v int32) *int32 { return &v }

// serverPod is the Pod status.podName names.
func serverPod(ctx context.Context, s *v1alpha1.McpServer) *corev1.Pod {
	GinkgoHelper()
	Expect(s.Status.PodName).NotTo(BeEmpty())
	pod := &corev1.Pod{}
	Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Status.PodName}, pod)).To(Succeed())
	return pod
}

// shimAndServer finds the shim and the server process in the Pod's cgroup.
func shimAndServer(pod *corev1.Pod) (shim, server int) {
	GinkgoHelper()
	Eventually(func() (map[string]int, error) {
		pids, err := testcluster.PodProcesses(pod.UID)
		byComm := map[string]int{}
		for _, pid := range pids {
			if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
				byComm[strings.TrimSpace(string(c))] = pid
			}
		}
		shim, server = byComm["shim"], byComm["mcp-fixture"]
		return byComm, err
	}).Within(timeout).ProbeEvery(poll).Should(And(HaveKey("shim"), HaveKey("mcp-fixture")))
	return shim, server
}

func ppidOf(pid int) int {
	for _, line := range strings.Split(readProc(pid, "status"), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func environ(pid int) []string {
	return strings.Split(strings.TrimRight(readProc(pid, "environ"), "\x00"), "\x00")
}

// expectNoChildOfTheManager: the manager Pod holds tini and the manager
// (and the sandbox's pause) and nothing else, and no process anywhere on
// the node is the manager's child.
func expectNoChildOfTheManager(ctx context.Context) {
	GinkgoHelper()
	mgr := readyManagerPod(ctx)
	pids, err := testcluster.PodProcesses(mgr.UID)
	Expect(err).NotTo(HaveOccurred())
	managerPID := 0
	for _, pid := range pids {
		comm := strings.TrimSpace(readProc(pid, "comm"))
		Expect([]string{"pause", "tini", "manager"}).To(ContainElement(comm), "process %d (%s) in the manager's Pod", pid, comm)
		if comm == "manager" {
			managerPID = pid
		}
	}
	Expect(managerPID).NotTo(BeZero())
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil &&
				strings.Contains(string(b), fmt.Sprintf("\nPPid:\t%d\n", managerPID)) {
				Fail(fmt.Sprintf("process %d is a child of the manager (%d)", pid, managerPID))
			}
		}
	}
}

// expectNothingRestarted: neither the manager nor the server's shim
// crashed or restarted because of the server.
func expectNothingRestarted(ctx context.Context, s *v1alpha1.McpServer) {
	GinkgoHelper()
	mgr := readyManagerPod(ctx)
	Expect(mgr.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "the manager restarted")
	var pods corev1.PodList
	Expect(cluster.Client.List(ctx, &pods, client.InNamespace(s.Namespace), client.MatchingLabels(podruntime.Labels(s.Name)))).To(Succeed())
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			Expect(cs.RestartCount).To(BeZero(), "container %s of %s restarted", cs.Name, p.Name)
		}
	}
}

func lastError(s *v1alpha1.McpServer) string {
	if s.Status.LastError == nil {
		return ""
	}
	return s.Status.LastError.Stage + ": " + s.Status.LastError.Message
}

func readyCondition(s *v1alpha1.McpServer) metav1.Condition {
	for _, c := range s.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

func deploymentYAML(ctx context.Context, s *v1alpha1.McpServer) string {
	out, err := cluster.Kubectl(ctx, "get", "deployment", "-n", s.Namespace, podruntime.DeploymentName(s.Name), "-o", "yaml")
	Expect(err).NotTo(HaveOccurred())
	return out
}

// leftovers lists what remains of the McpServer name's Pod runtime.
func leftovers(ctx context.Context, name string) ([]string, error) {
	var out []string
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}} {
		n := podruntime.DeploymentName(name)
		if _, ok := o.(*corev1.Secret); ok {
			n = podruntime.TokenSecretName(name)
		}
		err := cluster.Client.Get(ctx, types.NamespacedName{Namespace: podsNS, Name: n}, o)
		switch {
		case err == nil:
			out = append(out, fmt.Sprintf("%T %s", o, n))
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	var pods corev1.PodList
	if err := cluster.Client.List(ctx, &pods, client.InNamespace(podsNS), client.MatchingLabels(podruntime.Labels(name))); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		out = append(out, "Pod "+p.Name)
	}
	return out, nil
}

// serverWatch samples the node's processes and counts the fixture
// processes whose command line holds marker.
type serverWatch struct {
	mu       sync.Mutex
	maxAlive int
	seen     map[int]bool
	done     chan struct{}
	stopped  chan struct{}
}

func watchServers(marker string) *serverWatch {
	w := &serverWatch{seen: map[int]bool{}, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		for {
			select {
			case <-w.done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			alive := fixturesWith(marker)
			w.mu.Lock()
			w.maxAlive = max(w.maxAlive, len(alive))
			for _, pid := range alive {
				w.seen[pid] = true
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *serverWatch) stop() (maxAlive, distinct int) {
	close(w.done)
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxAlive, len(w.seen)
}

// fixturesWith lists the live (not zombie) fixture processes whose command
// line holds marker.
func fixturesWith(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "mcp-fixture" {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), marker) {
			continue
		}
		if st, err := proc.ReadStat(pid); err == nil && st.State == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// tokenSecret is the server's token Secret, with the Pod's credentials.
func tokenSecret(ctx context.Context, server *v1alpha1.McpServer) *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: server.Namespace, Name: podruntime.TokenSecretName(server.Name)}, s)).To(Succeed())
	return s
}
