package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	toolregistry "github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

// Idle servers against a real apiserver, with the fixture as the server and
// the supervisors' clock injected (idleClock, for McpServers named idle-*):
// the specs step it past spec.idle.suspendAfterMs instead of waiting a
// minute. See docs/design.md, "Idle servers".

const suspendAfterMs = 60000

// withIdle sets spec.idle.suspendAfterMs to the floor.
func withIdle(obj *v1alpha1.McpServer) *v1alpha1.McpServer {
	obj.Spec.Idle = &v1alpha1.IdlePolicy{SuspendAfterMs: ptr32(suspendAfterMs)}
	return obj
}

// suspended steps the idle clock a minute per poll until ns/name is Idle,
// and returns it.
func suspended(ns, name string) *v1alpha1.McpServer {
	GinkgoHelper()
	Eventually(func() v1alpha1.Phase {
		idleClock.Step(time.Minute)
		return phaseOf(ns, name)()
	}, eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseIdle))
	return get(ns, name)
}

// idleServersIn reads mcpbridge_idle_servers for ns (false: no series).
func idleServersIn(ns string) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "mcpbridge_idle_servers" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == ns {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// idleCount polls idleServersIn(ns), 0 without a series.
func idleCount(ns string) func() float64 {
	return func() float64 { v, _ := idleServersIn(ns); return v }
}

// callEcho calls echo through the gateway; a failed call is a tool error.
func callEcho(agent *mcp.ClientSession, tool, text string) (string, bool, error) {
	res, err := agent.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
	if err != nil {
		return "", false, err
	}
	return textOf(res), res.IsError, nil
}

var _ = Describe("Idle servers", func() {
	BeforeEach(ensureGatewayUserRole)

	It("suspend a Local server after suspendAfterMs without a call: Ready stays True, its tools stay listed, no process and no health check while idle", func(ctx SpecContext) {
		ns := newNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		obj := withIdle(stdioServer(ns, "idle-fx", "--events-file="+events))
		obj.Spec.HealthCheckIntervalMs = ptr32(1000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		ready := readyAt(ns, "idle-fx", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		echo := toolregistry.PublicName("idle-fx", fixture.ToolEcho)
		Expect(listToolNames(agent)).To(ContainElement(echo))

		got := suspended(ns, "idle-fx")
		c := meta(got, v1alpha1.ConditionReady)
		Expect(c.Status).To(BeEquivalentTo("True"))
		Expect(c.Reason).To(Equal(v1alpha1.ReasonIdle))
		Expect(c.Message).To(ContainSubstring("the next tool call wakes the server"))
		Expect(meta(got, v1alpha1.ConditionReconciling)).To(BeNil())
		Expect(meta(got, v1alpha1.ConditionStalled)).To(BeNil())
		Expect(kstatusOf(got)).To(Equal(status.CurrentStatus))
		Expect(got.Status.Tools).To(Equal(ready.Status.Tools))
		Expect(got.Status.ConnectionGeneration).To(BeEquivalentTo(1))
		Eventually(hasEvent(ns, "idle-fx", v1alpha1.ReasonSuspended, "the next tool call wakes the server"), eventuallyTimeout, poll).Should(BeTrue())
		// Gone from /proc (reaped), whether it wrote its exit event or was
		// killed before it could.
		lives := lifetimes(events)
		Expect(lives).To(HaveLen(1))
		Eventually(func() error { _, err := proc.ReadStat(lives[0].PID); return err }, eventuallyTimeout, poll).Should(
			HaveOccurred(), "the sleeping server's process still runs")
		Expect(listToolNames(agent)).To(ContainElement(echo), "tools/list through the gateway lost the sleeping server's tools")
		Eventually(idleCount(ns), eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		out, _, err := env.Kubectl(ctx, "get", "mcpservers", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`PHASE.*\nidle-fx\s+idle-fx\s+stdio\s+Idle\s`))

		// Health-check intervals pass: nothing runs that could be probed,
		// nothing starts, and tools/list does not wake the server.
		for range 5 {
			idleClock.Step(time.Second)
			Expect(listToolNames(agent)).To(ContainElement(echo))
		}
		Consistently(func(g Gomega) {
			g.Expect(lifetimes(events)).To(HaveLen(1))
			g.Expect(get(ns, "idle-fx").Status.Phase).To(Equal(v1alpha1.PhaseIdle))
		}, time.Second, poll).Should(Succeed())
	})

	It("wake on the first call with the call's answer, one wake for concurrent calls", func(ctx SpecContext) {
		ns := newNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, withIdle(stdioServer(ns, "idle-fx", "--events-file="+events)))).To(Succeed())
		readyAt(ns, "idle-fx", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		suspended(ns, "idle-fx")
		echo := toolregistry.PublicName("idle-fx", fixture.ToolEcho)

		const callers = 6
		var wg sync.WaitGroup
		texts, isErr, errs := make([]string, callers), make([]bool, callers), make([]error, callers)
		for i := range callers {
			wg.Go(func() { texts[i], isErr[i], errs[i] = callEcho(agent, echo, fmt.Sprintf("hello %d", i)) })
		}
		wg.Wait()
		for i := range callers {
			Expect(errs[i]).NotTo(HaveOccurred())
			Expect(isErr[i]).To(BeFalse(), texts[i])
			Expect(texts[i]).To(Equal(fmt.Sprintf("hello %d", i)))
		}
		woken := readyAt(ns, "idle-fx", 2)
		Expect(woken.Status.ConnectionGeneration).To(BeEquivalentTo(2), "concurrent calls woke the server more than once")
		Expect(lifetimes(events)).To(HaveLen(2))
		Eventually(hasEvent(ns, "idle-fx", v1alpha1.ReasonWoken, "Woke for a tool call in"), eventuallyTimeout, poll).Should(BeTrue())
		Eventually(func() float64 { v, _ := metricValue("mcpbridge_wakes_total", ns, "idle-fx"); return v }, eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		Eventually(func() bool { _, ok := idleServersIn(ns); return ok }, eventuallyTimeout, poll).Should(BeFalse())
	})

	It("send agents list_changed when the woken server lists other tools than the one that went to sleep", func(ctx SpecContext) {
		ns := newNamespace()
		dir := GinkgoT().TempDir()
		args := filepath.Join(dir, "args")
		Expect(os.WriteFile(args, nil, 0o600)).To(Succeed())
		// The server reads its arguments at every start, so that the woken
		// process can list a tool the sleeping one did not.
		script := filepath.Join(dir, "fixture.sh")
		Expect(os.WriteFile(script, []byte("#!/bin/sh\nexec "+fixtureBin+" $(cat "+args+")\n"), 0o700)).To(Succeed())
		obj := withIdle(stdioServer(ns, "idle-fx"))
		obj.Spec.Stdio.Command = script
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		readyAt(ns, "idle-fx", 1)
		var changes atomic.Int32
		agent := connectAgent(ns, saToken(ns, "agent", ns), &changes)
		added := toolregistry.PublicName("idle-fx", fixture.GeneratedToolName(0))
		Expect(listToolNames(agent)).NotTo(ContainElement(added))
		suspended(ns, "idle-fx")
		Expect(os.WriteFile(args, []byte("--tools=1"), 0o600)).To(Succeed())
		Expect(changes.Load()).To(BeZero(), "the suspend changed the listed tools")

		text, isErr, err := callEcho(agent, toolregistry.PublicName("idle-fx", fixture.ToolEcho), "wake up")
		Expect(err).NotTo(HaveOccurred())
		Expect(isErr).To(BeFalse(), text)
		Expect(text).To(Equal("wake up"))
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">=", 1), "no list_changed after a wake with other tools")
		Expect(listToolNames(agent)).To(ContainElement(added))
		Expect(toolNames(readyAt(ns, "idle-fx", 2))).To(ContainElement(added))
	})

	It("apply a new suspendAfterMs in place while idle, and wake for any other spec edit", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, withIdle(stdioServer(ns, "idle-fx")))).To(Succeed())
		readyAt(ns, "idle-fx", 1)
		suspended(ns, "idle-fx")

		editSpec(ns, "idle-fx", func(obj *v1alpha1.McpServer) { obj.Spec.Idle.SuspendAfterMs = ptr32(2 * suspendAfterMs) })
		Eventually(func() int64 { return get(ns, "idle-fx").Status.ObservedGeneration }, eventuallyTimeout, poll).Should(BeEquivalentTo(2))
		Consistently(func(g Gomega) {
			got := get(ns, "idle-fx")
			g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseIdle))
			g.Expect(got.Status.ConnectionGeneration).To(BeEquivalentTo(1))
		}, time.Second, poll).Should(Succeed(), "a new suspendAfterMs reconnected a sleeping server")

		editSpec(ns, "idle-fx", func(obj *v1alpha1.McpServer) {
			obj.Spec.Stdio.Args = append(obj.Spec.Stdio.Args, "--server-version=2.0.0")
		})
		woken := readyAt(ns, "idle-fx", 2)
		Expect(woken.Status.ServerInfo.Version).To(Equal("2.0.0"))
		suspended(ns, "idle-fx")
	})

	It("delete an idle server: its tools leave the gateway and its metrics go", func(ctx SpecContext) {
		ns := newNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, withIdle(stdioServer(ns, "idle-fx", "--events-file="+events)))).To(Succeed())
		readyAt(ns, "idle-fx", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		suspended(ns, "idle-fx")
		Eventually(idleCount(ns), eventuallyTimeout, poll).Should(BeEquivalentTo(1))

		Expect(k8s.Delete(ctx, get(ns, "idle-fx"))).To(Succeed())
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).Should(BeEmpty())
		Eventually(func() bool { _, ok := idleServersIn(ns); return ok }, eventuallyTimeout, poll).Should(BeFalse())
		Eventually(func() *bridge.Supervisor { return sups.Get(k8stypes.NamespacedName{Namespace: ns, Name: "idle-fx"}) }, eventuallyTimeout, poll).Should(BeNil())
		Expect(lifetimes(events)).To(HaveLen(1), "deleting a sleeping server woke it")
	})
})

// The Pod runtime's sleep: the Deployment at 0 replicas. envtest runs no
// controller-manager, so the specs do what its ReplicaSet controller would:
// delete the Pod when the Deployment goes to 0, create one when it comes
// back to 1 (see podruntime_test.go).
var _ = Describe("Idle Pod-runtime servers", Ordered, func() {
	var (
		shimBin  string
		shimPort int
	)
	BeforeAll(func() {
		shimBin = filepath.Join(GinkgoT().TempDir(), "shim")
		Expect(testenv.Build(shimBin, "./cmd/shim")).To(Succeed())
		shimPort = freePort()
		stopManager()
		startManagerWith(policy.RuntimeConfig{}, podruntime.Options{ShimImage: testShimImage, Port: int32(shimPort)})
	})
	AfterAll(func() {
		stopManager()
		startManager()
	})
	BeforeEach(ensureGatewayUserRole)

	replicas := func(ns, name string) func() int32 {
		return func() int32 { return *deploymentOf(ns, name).Spec.Replicas }
	}

	// asleep brings ns/name up in a Pod, suspends it, and removes its Pod as
	// the ReplicaSet would at 0 replicas.
	asleep := func(ctx context.Context, ns, name string, mutate func(*v1alpha1.McpServer)) *mcp.ClientSession {
		GinkgoHelper()
		obj := withIdle(podServer(ns, name))
		mutate(obj)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		d := deploymentOf(ns, name)
		runShim(shimBin, shimPort, tokenSecretOf(ns, name), fixtureBin)
		pod := createPod(ns, name, d)
		setPodStatus(pod, readyStatus())
		Expect(readyAt(ns, name, 1).Status.PodName).To(Equal(pod.Name))
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)

		got := suspended(ns, name)
		Expect(got.Status.PodName).To(BeEmpty())
		Eventually(replicas(ns, name), eventuallyTimeout, poll).Should(BeZero())
		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		// The wake must not find the deleted Pod still Ready in the manager's
		// cache: a real ReplicaSet marks it deleting first, envtest deletes
		// it at once and the cache learns it later.
		Eventually(func(g Gomega) {
			g.Expect(mgrCache.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})).To(Satisfy(apierrors.IsNotFound))
		}, eventuallyTimeout, poll).Should(Succeed())
		return agent
	}

	It("scale a sleeping server's Deployment to 0 and back to 1 for the first call, which gets its answer", func(ctx SpecContext) {
		ns := podNamespace()
		agent := asleep(ctx, ns, "idle-pod", func(*v1alpha1.McpServer) {})
		echo := toolregistry.PublicName("idle-pod", fixture.ToolEcho)
		Expect(listToolNames(agent)).To(ContainElement(echo))
		Consistently(replicas(ns, "idle-pod"), 500*time.Millisecond, poll).Should(BeZero(), "tools/list woke the server")

		type answer struct {
			text  string
			isErr bool
			err   error
		}
		done := make(chan answer, 1)
		go func() {
			text, isErr, err := callEcho(agent, echo, "wake up")
			done <- answer{text, isErr, err}
		}()
		Eventually(replicas(ns, "idle-pod"), eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		Eventually(func(g Gomega) {
			got := get(ns, "idle-pod")
			g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
			g.Expect(got.Status.LastError).NotTo(BeNil())
			g.Expect(got.Status.LastError.Stage).To(Equal("pod"))
		}, eventuallyTimeout, poll).Should(Succeed(), "the wake waits for the Pod, stage pod")
		Consistently(done, 300*time.Millisecond).ShouldNot(Receive(), "the call was answered without a Pod")

		pod := createPod(ns, "idle-pod", deploymentOf(ns, "idle-pod"))
		setPodStatus(pod, readyStatus())
		var a answer
		Eventually(done, eventuallyTimeout).Should(Receive(&a))
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.isErr).To(BeFalse(), a.text)
		Expect(a.text).To(Equal("wake up"))
		woken := readyAt(ns, "idle-pod", 2)
		Expect(woken.Status.PodName).To(Equal(pod.Name))
		Expect(woken.Status.LastError).To(BeNil())
	})

	It("fail a wake whose Pod never comes up like any outage: the status says why, and so does the call's error", func(ctx SpecContext) {
		ns := podNamespace()
		agent := asleep(ctx, ns, "idle-broken", func(obj *v1alpha1.McpServer) { obj.Spec.ConnectionTimeoutMs = ptr32(4000) })
		echo := toolregistry.PublicName("idle-broken", fixture.ToolEcho)

		done := make(chan string, 1)
		go func() {
			defer GinkgoRecover()
			text, isErr, err := callEcho(agent, echo, "wake up")
			Expect(err).NotTo(HaveOccurred())
			Expect(isErr).To(BeTrue(), "a failed wake answered: "+text)
			done <- text
		}()
		Eventually(replicas(ns, "idle-broken"), eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		pod := createPod(ns, "idle-broken", deploymentOf(ns, "idle-broken"))
		setPodStatus(pod, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			waitingStatus(podruntime.ServerContainer, "ErrImagePull", "not found")}})

		var text string
		Eventually(done, eventuallyTimeout).Should(Receive(&text))
		Expect(text).To(ContainSubstring(`waking server "idle-broken" failed`))
		Expect(text).To(ContainSubstring("the server's Pod was not Ready after 4000ms (connectionTimeoutMs): ErrImagePull"))
		Eventually(func(g Gomega) {
			got := get(ns, "idle-broken")
			g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseReconnecting))
			g.Expect(got.Status.FailedAttempts).To(BeEquivalentTo(1))
			g.Expect(got.Status.LastError).NotTo(BeNil())
			g.Expect(got.Status.LastError.Stage).To(Equal("pod"))
			g.Expect(got.Status.LastError.Message).To(ContainSubstring("ErrImagePull"))
		}, eventuallyTimeout, poll).Should(Succeed())
		Eventually(func() float64 { v, _ := metricValue("mcpbridge_wakes_total", ns, "idle-broken"); return v }, eventuallyTimeout, poll).Should(BeEquivalentTo(1))
	})
})
