package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// Idle servers on the supervisor's clock, with the fixture as a real
// child: the suspend ends the child and keeps the tools, the first call
// wakes it, concurrent calls share one wake, a call in flight keeps the
// server awake. See docs/design.md, "Idle servers".

const suspendAfter = time.Minute

// idleSupervisor runs the fixture with suspendAfter on a fake clock.
func idleSupervisor(t *testing.T) (*Supervisor, *registry.Registry, *clocktesting.FakeClock) {
	t.Helper()
	p := stdioPolicy()
	p.SuspendAfter = suspendAfter
	p.HealthCheckInterval = 0
	fc := clocktesting.NewFakeClock(time.Now())
	s, reg := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = 200 * time.Millisecond; o.Clock = fc })
	waitFor(t, s, "Ready", isReady)
	return s, reg, fc
}

func isIdle(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseIdle }

func echo(ctx context.Context, s *Supervisor, text string) (string, error) {
	res, err := s.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": text})
	if err != nil {
		return "", err
	}
	return RenderText(res), nil
}

// waitTimers waits until serve has armed the idle timer and the stability
// window of the generation on the fake clock.
func waitTimers(t *testing.T, fc *clocktesting.FakeClock) {
	t.Helper()
	NewWithT(t).Eventually(fc.Waiters, eventually, 5*time.Millisecond).Should(Equal(2))
}

func TestIdleSuspendsAfterSuspendAfterWithoutACallAndKeepsTheTools(t *testing.T) {
	g := NewWithT(t)
	s, reg, fc := idleSupervisor(t)
	pid := stdioCallPID(t, s)
	tools := reg.Owned("ns", "ns/srv")
	g.Expect(tools).NotTo(BeEmpty())
	waitTimers(t, fc)

	fc.Step(suspendAfter - time.Second)
	g.Consistently(s.Snapshot, 300*time.Millisecond, 20*time.Millisecond).Should(HaveField("Phase", v1alpha1.PhaseReady),
		"suspended before suspendAfter had passed")
	fc.Step(time.Second)
	sn := waitFor(t, s, "Idle", isIdle)
	stdioWaitGone(t, pid, "the sleeping server's child")
	g.Expect(sn.Generation).To(BeEquivalentTo(1))
	g.Expect(reg.Owned("ns", "ns/srv")).To(Equal(tools), "the tools left the registry while the server sleeps")
	g.Expect(s.Sleeping()).To(BeTrue())
	g.Expect(s.DrainEvents()).To(ContainElement(HaveField("Reason", "Suspended")))
}

func TestIdleWakesOnACallAndConcurrentCallsShareTheWake(t *testing.T) {
	g := NewWithT(t)
	s, _, fc := idleSupervisor(t)
	waitTimers(t, fc)
	fc.Step(suspendAfter)
	waitFor(t, s, "Idle", isIdle)
	s.DrainEvents()

	const callers = 8
	var wg sync.WaitGroup
	got := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { got[i], errs[i] = echo(context.Background(), s, "wake "+string(rune('a'+i))) })
	}
	wg.Wait()
	for i := range callers {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(got[i]).To(Equal("wake " + string(rune('a'+i))))
	}
	sn := s.Snapshot()
	g.Expect(sn.Phase).To(Equal(v1alpha1.PhaseReady))
	g.Expect(sn.Generation).To(BeEquivalentTo(2), "concurrent calls woke the server more than once")
	g.Expect(s.Sleeping()).To(BeFalse())
	g.Expect(s.DrainEvents()).To(ContainElement(SatisfyAll(HaveField("Reason", "Woken"),
		HaveField("Message", ContainSubstring("Woke for a tool call in")))))
}

func TestIdleCallInFlightKeepsTheServerAwake(t *testing.T) {
	g := NewWithT(t)
	s, _, fc := idleSupervisor(t)
	waitTimers(t, fc)
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := s.CallTool(context.Background(), fixture.ToolSleep, map[string]any{"ms": 1500})
		done <- err
	}()
	g.Eventually(func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.inflight }, eventually).Should(Equal(1))
	fc.Step(2 * suspendAfter)
	g.Consistently(s.Snapshot, 500*time.Millisecond, 20*time.Millisecond).Should(HaveField("Phase", v1alpha1.PhaseReady),
		"suspended with a call in flight")
	g.Eventually(done, eventually).Should(Receive(BeNil()), "the call in flight failed")
	t.Logf("the sleep call took %v", time.Since(started))
	// The idle time counts from the call's end.
	fc.Step(suspendAfter - time.Second)
	g.Consistently(s.Snapshot, 300*time.Millisecond, 20*time.Millisecond).Should(HaveField("Phase", v1alpha1.PhaseReady))
	fc.Step(suspendAfter)
	waitFor(t, s, "Idle", isIdle)
}

func TestIdleSuspendAfterChangesInPlace(t *testing.T) {
	g := NewWithT(t)
	s, _, fc := idleSupervisor(t)
	waitTimers(t, fc)
	s.SetSuspendAfter(0)
	fc.Step(10 * suspendAfter)
	g.Consistently(s.Snapshot, 500*time.Millisecond, 20*time.Millisecond).Should(HaveField("Phase", v1alpha1.PhaseReady),
		"suspendAfter 0 still suspended")
	s.SetSuspendAfter(2 * suspendAfter)
	g.Eventually(fc.HasWaiters, eventually).Should(BeTrue())
	fc.Step(2 * suspendAfter)
	sn := waitFor(t, s, "Idle", isIdle)
	g.Expect(sn.Generation).To(BeEquivalentTo(1), "a new suspendAfter reconnected")
}

func TestIdleDisposeWhileAsleep(t *testing.T) {
	g := NewWithT(t)
	s, reg, fc := idleSupervisor(t)
	waitTimers(t, fc)
	fc.Step(suspendAfter)
	waitFor(t, s, "Idle", isIdle)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.Expect(s.Dispose(ctx)).To(Succeed())
	g.Expect(s.Closed()).To(BeClosed())
	g.Expect(reg.Owned("ns", "ns/srv")).To(BeEmpty())
	_, err := echo(context.Background(), s, "late")
	g.Expect(err).To(MatchError(ContainSubstring("unavailable")))
}

// A Pod-runtime server wakes through the Pod wait: the wake counts against
// the call's toolCallTimeoutMs, and a call whose time runs out first says
// that it timed out while the server was waking, and why. The wake goes on
// and connects once the Pod is Ready.
func TestIdleWakeCountsAgainstTheCallTimeout(t *testing.T) {
	g := NewWithT(t)
	sh := startPodShim(t, fixtureBin)
	pods := newTestPods()
	pods.set(readyPod("srv-mcp-1", "uid-1"), true)
	p := podPolicy()
	p.SuspendAfter, p.HealthCheckInterval, p.ToolCallTimeout = suspendAfter, 0, 500*time.Millisecond
	fc := clocktesting.NewFakeClock(time.Now())
	s, reg := startSupervisor(t, p, func(o *Options) {
		o.Pod = &PodTunnel{Pods: pods, Token: podToken, Cert: podCert, Port: sh.port}
		o.Log = stdioLog(t)
		o.Clock = fc
	})
	waitFor(t, s, "Ready", isReady)
	waitTimers(t, fc)
	fc.Step(suspendAfter)
	sn := waitFor(t, s, "Idle", isIdle)
	g.Expect(sn.PodName).To(BeEmpty())
	g.Expect(s.Sleeping()).To(BeTrue())
	pods.set(PodInfo{}, false) // scaled to 0: the Pod is gone

	started := time.Now()
	_, err := echo(context.Background(), s, "too early")
	g.Expect(err).To(MatchError(ContainSubstring("the tool call timed out after 500ms while the server was waking")))
	g.Expect(err).To(MatchError(ContainSubstring("No Pod of the current template yet (stage: pod)")))
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
	t.Logf("the call gave up after %v", time.Since(started))
	g.Expect(s.Sleeping()).To(BeFalse(), "a requested wake still asks for 0 replicas")
	g.Expect(s.Snapshot().Phase).To(Equal(v1alpha1.PhaseConnecting))
	g.Expect(reg.Owned("ns", "ns/srv")).NotTo(BeEmpty())

	pods.set(readyPod("srv-mcp-2", "uid-2"), true)
	sn = waitFor(t, s, "Ready after the wake", isReady)
	g.Expect(sn.PodName).To(Equal("srv-mcp-2"))
	g.Expect(sn.Generation).To(BeEquivalentTo(2))
	got, err := echo(context.Background(), s, "awake")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal("awake"))
}
