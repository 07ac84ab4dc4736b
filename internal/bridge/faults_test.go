package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/test/fixture"
)

// faultsCallLoop calls echo over and over until stop, counting outcomes; it
// keeps writes going to children that are dying.
func faultsCallLoop(s *Supervisor, stop <-chan struct{}) (wait func() (ok, failed int64)) {
	var okN, failN atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := s.CallTool(ctx, "echo", map[string]any{"text": "x"})
				cancel()
				if err != nil {
					failN.Add(1)
					if errors.Is(err, ErrUnavailable) {
						time.Sleep(time.Millisecond)
					}
				} else {
					okN.Add(1)
				}
			}
		}()
	}
	return func() (int64, int64) {
		wg.Wait()
		return okN.Load(), failN.Load()
	}
}

// The child dies while a call is in flight (the crash tool exits
// mid-call, and other calls keep writing to its stdin): the calls fail
// with an error, nothing panics, and the server reconnects.
// See docs/design.md, "Detecting loss".
func TestFaultChildDyingMidCallFailsTheCallAndReconnects(t *testing.T) {
	ev := eventsPath(t)
	s, _ := startSupervisor(t, stdioPolicy("--events-file="+ev))
	waitFor(t, s, "Ready", isReady)
	stop := make(chan struct{})
	wait := faultsCallLoop(s, stop)
	start := time.Now()
	res, err := s.CallTool(context.Background(), fixture.ToolCrash, map[string]any{})
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("crash call succeeded: %v", RenderText(res))
	}
	var se *StageError
	if !errors.As(err, &se) || se.Stage != StageToolsCall {
		t.Errorf("crash call error %v, want a tools-call StageError", err)
	}
	t.Logf("crash call failed after %v: %v", elapsed, err)
	if elapsed > 5*time.Second {
		t.Errorf("the call to a dying child took %v", elapsed)
	}
	sn := waitFor(t, s, "generation 2 Ready", func(sn Snapshot) bool { return sn.Generation >= 2 && sn.Phase == v1alpha1.PhaseReady })
	close(stop)
	okN, failN := wait()
	t.Logf("concurrent echo calls: %d ok, %d failed", okN, failN)
	if sn.Generation != 2 {
		t.Errorf("generation %d, want 2", sn.Generation)
	}
	evs := mustEvents(t, ev)
	crashed := slices.ContainsFunc(evs, func(e fixture.Event) bool { return e.Kind == fixture.EventCrash && e.Code == fixture.CrashExitCode })
	if !crashed {
		t.Errorf("the fixture did not record its crash: %v", evs)
	}
	if res, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "back"}); err != nil || RenderText(res) != "back" {
		t.Errorf("echo after recovery: %v %v", res, err)
	}
}

// Children that die while list_changed notifications and re-syncs are
// in flight, at staggered moments of their connection, over several
// generations, while calls keep writing to them: no panic, and the server
// recovers once a child stays up.
// See docs/design.md, "Detecting loss".
func TestFaultChildDyingDuringNotificationsAndResyncRecovers(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "count")
	ev := filepath.Join(dir, "events")
	// Start k (0-based) of the first 8 adds late_tool after 3k+1 ms and
	// exits 1 ms later; later starts behave.
	script := `n=$(cat "` + counter + `" 2>/dev/null || echo 0); echo $((n+1)) > "` + counter + `"
if [ "$n" -lt 8 ]; then exec "$0" --list-changed-after=$((n*3+1))ms --exit-after=$((n*3+2))ms "$@"; fi
exec "$0" "$@"`
	p := stdioPolicy()
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", script, fixtureBin, "--tools=3", "--events-file=" + ev}
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, MaxAttempts: 50}
	s, reg := startSupervisor(t, p)
	stop := make(chan struct{})
	wait := faultsCallLoop(s, stop)
	sn := waitFor(t, s, "a generation that stays Ready", func(sn Snapshot) bool {
		return sn.Phase == v1alpha1.PhaseFailed || (sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 9)
	})
	close(stop)
	okN, failN := wait()
	t.Logf("generation %d Ready; concurrent echo calls: %d ok, %d failed", sn.Generation, okN, failN)
	if sn.Phase != v1alpha1.PhaseReady {
		t.Fatalf("did not recover: %s: %s (%v)", sn.Reason, sn.Message, sn.LastError)
	}
	if n := len(stdioStarts(mustEvents(t, ev))); n < 9 {
		t.Errorf("only %d children started", n)
	}
	if got := len(reg.Tools("ns")); got != 3+len(fixture.BuiltinTools) {
		t.Errorf("after recovery %d tools registered, want %d", got, 3+len(fixture.BuiltinTools))
	}
	if _, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "x"}); err != nil {
		t.Errorf("echo after recovery: %v", err)
	}
}

// A line of invalid JSON from the server is a loss (then a recovery) or a
// clear error, never a crash or a hang: the server stays usable.
func TestFaultInvalidJSONFromServerNeverCrashesOrHangs(t *testing.T) {
	p := stdioPolicy("--invalid-json-after=300ms")
	// Every child sends garbage 300ms after it started: keep its
	// connections "stable" so that the budget never runs out.
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond, MaxAttempts: 3}
	s, _ := startSupervisor(t, p)
	expectInvalidJSONSurvived(t, s)
}

// expectInvalidJSONSurvived checks a supervisor whose server writes a line
// of invalid JSON shortly after it starts: no call hangs, every error says
// why, a replaced connection says why, and the server answers again.
func expectInvalidJSONSurvived(t *testing.T, s *Supervisor) {
	t.Helper()
	waitFor(t, s, "Ready", isReady)
	rec := stdioRecord(t, s)
	// Well past the garbage line: calls keep working, or the connection is
	// replaced and they work again; no call hangs, every error says why.
	calls, fails := 0, 0
	NewWithT(t).Consistently(func(g Gomega) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := s.CallTool(ctx, "echo", map[string]any{"text": "x"})
		// A hung call is one that only its deadline ends: the event, not a time.
		g.Expect(ctx.Err()).To(BeNil(), "a call hung after invalid JSON until its deadline: %v", err)
		calls++
		if err != nil {
			fails++
			g.Expect(err.Error()).NotTo(BeEmpty(), "an error without a message")
		}
	}, 1500*time.Millisecond, 10*time.Millisecond).Should(Succeed())
	sn := waitFor(t, s, "Ready", isReady)
	rec.close()
	t.Logf("%d calls, %d failed; generation %d", calls, fails, sn.Generation)
	if sn.Generation > 1 {
		lost := false
		for _, st := range rec.history() {
			if st.sn.LastError != nil && st.sn.LastError.Message() != "" {
				lost = true
			}
		}
		if !lost {
			t.Errorf("the connection was replaced without a lastError")
		}
	}
	// Every child writes its garbage line 300ms after it started, so a call
	// may meet the next one's (ErrUnavailable between generations, or the
	// invalid JSON itself on a loaded machine): the server is usable again
	// when a call succeeds.
	NewWithT(t).Eventually(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		res, err := s.CallTool(ctx, "echo", map[string]any{"text": "alive"})
		if err != nil {
			return "", err
		}
		return RenderText(res), nil
	}, eventually, 10*time.Millisecond).Should(Equal("alive"), "echo after invalid JSON")
}

// A raw name listed twice rejects the fetch with a message naming the
// tool; nothing is registered.
// See docs/design.md, "Tool sync".
func TestFaultDuplicateRawNameRejectsTheFetch(t *testing.T) {
	p := stdioPolicy("--duplicate-name")
	p.Reconnect.MaxAttempts = 1
	var watch *stdioRegistryWatch
	s, reg := startSupervisor(t, p, func(o *Options) { watch = stdioWatchRegistry(t, o.Registry, "ns") })
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.LastError == nil {
		t.Fatalf("no lastError: %+v", sn)
	}
	t.Logf("lastError: %v", sn.LastError)
	if !strings.Contains(sn.LastError.Message(), `"echo"`) || !strings.Contains(sn.LastError.Message(), "twice") {
		t.Errorf("message %q does not name the duplicated tool", sn.LastError.Message())
	}
	if sn.LastError.Stage != StageToolsList(1) {
		t.Errorf("stage %q, want %q", sn.LastError.Stage, StageToolsList(1))
	}
	if n := len(reg.Tools("ns")); n != 0 {
		t.Errorf("%d tools registered from a rejected fetch", n)
	}
	if n := watch.changes.Load(); n != 0 {
		t.Errorf("registry changed %d times", n)
	}
	if len(sn.Tools) != 0 {
		t.Errorf("snapshot tools %v", toolNames(sn.Tools))
	}
}

// Scale: 10,000 tools over 10 pages are all published.
func TestFaultTenThousandToolsAllPublished(t *testing.T) {
	p := stdioPolicy("--tools=10000", "--page-size=1000")
	p.ConnectionTimeout = 60 * time.Second
	start := time.Now()
	s, reg := startSupervisor(t, p)
	// Listing 10,000 tools takes seconds under -race on a loaded machine:
	// a longer bound than waitFor's.
	var sn Snapshot
	NewWithT(t).Eventually(func() (v1alpha1.Phase, error) {
		sn = s.Snapshot()
		if sn.LastError != nil {
			return sn.Phase, StopTrying(fmt.Sprintf("not Ready: %+v", sn))
		}
		return sn.Phase, nil
	}, 90*time.Second, 20*time.Millisecond).Should(Equal(v1alpha1.PhaseReady))
	t.Logf("10,008 tools over 11 pages published in %v", time.Since(start))
	want := 10000 + len(fixture.BuiltinTools)
	if len(sn.Tools) != want {
		t.Errorf("snapshot has %d tools, want %d", len(sn.Tools), want)
	}
	tools := reg.Tools("ns")
	if len(tools) != want {
		t.Fatalf("registry has %d tools, want %d", len(tools), want)
	}
	for _, i := range []int{0, 999, 1000, 5000, 9999} {
		name := fixture.GeneratedToolName(i)
		if !hasTool(tools, name) {
			t.Errorf("%s missing", name)
		}
	}
	res, err := s.CallTool(context.Background(), fixture.GeneratedToolName(9999), map[string]any{"text": "z"})
	if err != nil || !strings.HasPrefix(RenderText(res), "tool_9999 ") {
		t.Errorf("call tool_9999: %v %v", res, err)
	}
}

// Scale: tools with 100 kB input schemas are published whole.
func TestFaultHugeSchemasPublishedWhole(t *testing.T) {
	p := stdioPolicy("--tools=20", "--schema-bytes=100000")
	p.ConnectionTimeout = 60 * time.Second
	s, reg := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	tools := reg.Tools("ns")
	if len(tools) != 20+len(fixture.BuiltinTools) {
		t.Fatalf("registry has %d tools", len(tools))
	}
	tool, _, ok := reg.Lookup("ns", "mcp__fx__tool_0019")
	if !ok {
		t.Fatal("tool_0019 missing")
	}
	raw, ok := tool.Upstream().InputSchema.(json.RawMessage)
	if !ok {
		t.Fatalf("schema %T", tool.Upstream().InputSchema)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	if d, _ := schema["description"].(string); len(d) != 100000 {
		t.Errorf("schema description has %d bytes, want 100000", len(d))
	}
}

// A stopped (SIGSTOP) child answers nothing; the health check finds it
// (stage health-check) and the server reconnects to a new child. The
// probes run on the supervisor's clock, stepped here one interval at a time.
func TestFaultHealthCheckDetectsStoppedChild(t *testing.T) {
	g := NewWithT(t)
	const interval = time.Second // on the fake clock; a probe may take half of it, in real time
	p := stdioPolicy()
	p.HealthCheckInterval = interval
	fc := clocktesting.NewFakeClock(time.Now())
	s, _ := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = 200 * time.Millisecond; o.Clock = fc })
	waitFor(t, s, "Ready", isReady)
	pid := stdioCallPID(t, s)
	t.Cleanup(func() { stdioKillQuietly(pid) })
	rec := stdioRecord(t, s)
	stoppedAt := time.Now()
	g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	// Each poll steps one interval: a probe, and once the loss is seen the
	// backoff delay too.
	g.Eventually(func() Snapshot {
		fc.Step(interval)
		return s.Snapshot()
	}, eventually, 50*time.Millisecond).Should(SatisfyAll(
		HaveField("Generation", BeEquivalentTo(2)), HaveField("Phase", v1alpha1.PhaseReady)))
	t.Logf("stopped child replaced after %v", time.Since(stoppedAt))
	rec.close()
	sawHealth := false
	for _, st := range rec.history() {
		if le := st.sn.LastError; le != nil && le.Stage == StageHealthCheck {
			sawHealth = true
		}
	}
	g.Expect(sawHealth).To(BeTrue(), "the loss was not attributed to the health check")
	g.Expect(stdioCallPID(t, s)).NotTo(Equal(pid), "still talking to the stopped child")
	g.Expect(stdioGone(pid)).To(BeTrue(), "the stopped child was not killed and reaped before the next generation")
}

// Health probes run on the supervisor's clock: none while it stands still,
// one per interval stepped. A healthy idle connection survives them; one
// failed probe is not a loss, two in a row are.
func TestHealthChecksRunOnTheSupervisorsClock(t *testing.T) {
	g := NewWithT(t)
	const interval = time.Second // a probe's own deadline is half of it, in real time
	fs := stdioNewFakeServer(t, "alpha")
	d := &stdioFakeDialer{srv: fs.srv}
	p := stdioPolicy()
	p.HealthCheckInterval = interval
	fc := clocktesting.NewFakeClock(time.Now())
	s, _ := startSupervisor(t, p, stdioWithDialer(d), func(o *Options) { o.Clock = fc })
	t.Cleanup(d.release)
	waitFor(t, s, "Ready", isReady)
	probes := fs.listRequests.Load // on 2026-07-28 a probe is a tools/list
	base := probes()
	g.Consistently(probes, 3*time.Second/2, 20*time.Millisecond).Should(Equal(base), "a probe ran while the clock stood still")
	for i := int64(1); i <= 3; i++ {
		fc.Step(interval)
		g.Eventually(probes, eventually).Should(Equal(base + i))
	}
	ready := SatisfyAll(HaveField("Generation", BeEquivalentTo(1)), HaveField("Phase", v1alpha1.PhaseReady))
	failOne := func() {
		fs.stallNextList.Store(true)
		fc.Step(interval)
		g.Eventually(fs.listStalled, eventually).Should(Receive())
		// The stalled probe fails at its half-interval deadline; alone it
		// is no loss.
		g.Consistently(s.Snapshot, interval, 50*time.Millisecond).Should(ready)
	}
	failOne()
	fc.Step(interval) // a probe that succeeds resets the count
	g.Eventually(probes, eventually).Should(Equal(base + 5))
	failOne()
	fs.stallNextList.Store(true)
	fc.Step(interval)
	g.Eventually(func() string {
		fc.Step(p.Reconnect.InitialDelay) // the retry, once the loss is seen
		if le := s.Snapshot().LastError; le != nil {
			return le.Stage
		}
		return ""
	}, eventually, 50*time.Millisecond).Should(Equal(StageHealthCheck))
	g.Eventually(func() int {
		fc.Step(p.Reconnect.InitialDelay)
		return d.dialCount()
	}, eventually, 50*time.Millisecond).Should(Equal(2))
}

// A stopped child can neither see its stdin close nor handle SIGTERM,
// so disposal kills it at once instead of waiting out both graces.
// See docs/design.md, "Hot swap and disposal".
func TestFaultDisposeKillsStoppedChildAtOnce(t *testing.T) {
	const grace = 2 * time.Second
	s, _ := startSupervisor(t, stdioPolicy(), func(o *Options) { o.TerminateGrace = grace; o.CloseBarrier = 3 * grace })
	waitFor(t, s, "Ready", isReady)
	pid := stdioCallPID(t, s)
	t.Cleanup(func() { stdioKillQuietly(pid) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() byte { st, _, _ := stdioProcStat(pid); return st }, eventually, 10*time.Millisecond).
		Should(Equal(byte('T')), "pid %d never showed as stopped", pid)
	ctx, cancel := context.WithTimeout(context.Background(), 6*grace)
	defer cancel()
	start := time.Now()
	if err := s.Dispose(ctx); err != nil {
		t.Fatalf("dispose: %v", err)
	}
	if took := time.Since(start); took >= grace {
		t.Fatalf("disposing a stopped child took %v, at least the %v grace", took, grace)
	}
	if !stdioGone(pid) {
		t.Fatalf("the stopped child %d outlived Dispose", pid)
	}
}

// The child gets the allowlisted variables and the spec's env, never
// the manager's credentials or KUBERNETES_*.
// See docs/design.md, "stdio children".
func TestFaultChildEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_PORT", "tcp://10.0.0.1:443")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
	t.Setenv("MY_TOKEN", "token-value")
	t.Setenv("LC_FAULTS_TEST", "lc-value")
	t.Setenv("TERM", "manager-term")
	p := stdioPolicy()
	p.Stdio.Env = []policy.EnvVar{{Name: "SPEC_VAR", Value: "spec-value"}, {Name: "TERM", Value: "spec-term"}}
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	res, err := s.CallTool(context.Background(), fixture.ToolEnv, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(RenderText(res), "\n")
	has := func(kv string) bool { return slices.Contains(env, kv) }
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if strings.HasPrefix(name, "KUBERNETES_") || name == "AWS_SECRET_ACCESS_KEY" || name == "MY_TOKEN" {
			t.Errorf("child sees %s", e)
		}
		if strings.Contains(e, "aws-secret-value") || strings.Contains(e, "token-value") {
			t.Errorf("a manager secret reached the child: %s", e)
		}
	}
	if !has("PATH=" + os.Getenv("PATH")) {
		t.Errorf("PATH not passed: %v", env)
	}
	if !has("SPEC_VAR=spec-value") {
		t.Errorf("spec env not passed: %v", env)
	}
	if !has("LC_FAULTS_TEST=lc-value") {
		t.Errorf("LC_* not passed: %v", env)
	}
	terms := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return !strings.HasPrefix(e, "TERM=") })
	if !slices.Equal(terms, []string{"TERM=spec-term"}) {
		t.Errorf("TERM entries %v, want only the spec's value", terms)
	}
}

// Closing a generation signals the whole process group, and nothing
// is left behind: after Dispose the child is reaped at once, and its
// grandchild (which the child does not end itself) is gone too, not left
// running nor as a zombie.
// See docs/design.md, "stdio children".
func TestFaultDisposeLeavesNeitherChildNorGrandchild(t *testing.T) {
	ev := eventsPath(t)
	s, _ := startSupervisor(t, stdioPolicy("--spawn-grandchild", "--events-file="+ev))
	waitFor(t, s, "Ready", isReady)
	evs := waitEvents(t, ev, "start and grandchild", func(e []fixture.Event) bool {
		return len(stdioStarts(e)) == 1 && stdioCount(e, fixture.EventGrandchild, "") == 1
	})
	child := stdioStarts(evs)[0]
	grand := 0
	for _, e := range evs {
		if e.Kind == fixture.EventGrandchild {
			grand = e.PID
		}
	}
	t.Cleanup(func() { stdioKillQuietly(grand); stdioKillQuietly(child) })
	if st, _, ok := stdioProcStat(grand); !ok || st == 'Z' {
		t.Fatalf("grandchild %d not running before Dispose", grand)
	}
	t.Logf("dispose took %v", faultsDispose(t, s))
	if !stdioGone(child) {
		st, ppid, _ := stdioProcStat(child)
		t.Errorf("child %d not reaped when Dispose returned: state %c ppid %d", child, st, ppid)
	}
	zombieLogged := false
	NewWithT(t).Eventually(func() bool {
		if st, ppid, _ := stdioProcStat(grand); st == 'Z' && !zombieLogged {
			// Orphans go to PID 1 (or the nearest subreaper), which must reap them.
			t.Logf("grandchild %d is a zombie of pid %d", grand, ppid)
			zombieLogged = true
		}
		return stdioGone(grand)
	}, eventually, 5*time.Millisecond).Should(BeTrue(), func() string {
		st, ppid, _ := stdioProcStat(grand)
		return fmt.Sprintf("grandchild %d left behind after Dispose: state %c, parent %d (this process is %d)", grand, st, ppid, os.Getpid())
	})
}

func faultsDispose(t *testing.T, s *Supervisor) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// A child that ignores stdin EOF and SIGTERM is ended by SIGKILL
// within the close barrier.
// See docs/design.md, "stdio children".
func TestFaultDisposeKillsChildIgnoringSIGTERM(t *testing.T) {
	const grace = 200 * time.Millisecond
	p := stdioPolicy()
	// The fixture ignores SIGTERM; when stdin closes it exits and the shell
	// (SIGTERM ignored, inherited by exec) becomes a sleep.
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, fixtureBin, "--ignore-sigterm"}
	s, _ := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = grace })
	waitFor(t, s, "Ready", isReady)
	fx := stdioCallPID(t, s)
	_, leader, ok := stdioProcStat(fx)
	if !ok {
		t.Fatal("fixture pid not found")
	}
	t.Cleanup(func() { stdioKillQuietly(leader) })
	if _, ppid, _ := stdioProcStat(leader); ppid != os.Getpid() {
		t.Fatalf("pid %d is not our child", leader)
	}
	el := faultsDispose(t, s)
	t.Logf("dispose of a child ignoring SIGTERM took %v (grace %v, barrier 3s)", el, grace)
	if !stdioGone(leader) {
		st, ppid, _ := stdioProcStat(leader)
		t.Fatalf("child %d survived Dispose: state %c ppid %d", leader, st, ppid)
	}
	if el < 2*grace {
		t.Errorf("dispose returned after %v, before the SIGKILL step (2 x %v)", el, grace)
	}
	if el >= 3*time.Second {
		t.Errorf("dispose took %v: the close barrier, not SIGKILL, ended it", el)
	}
}

// The child's stderr is logged line by line, with the resource, and
// rate-limited per child.
// See docs/design.md, "stdio children".
func TestFaultChildStderrIsLoggedLineByLine(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	p := stdioPolicy("--no-such-flag") // the flag package prints usage on stderr
	p.Reconnect.MaxAttempts = 1
	s, _ := startSupervisor(t, p, func(o *Options) { o.Log = log })
	waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	re := regexp.MustCompile(`"msg"="stderr".*"pid"=(\d+).*"line"="(.*)"$`)
	var got []string
	// Each logged line must be one line with the resource, within the rate
	// limit, at every moment (StopTrying fails at once); the usage line must
	// show up.
	NewWithT(t).Eventually(func() (bool, error) {
		mu.Lock()
		got = slices.Clone(lines)
		mu.Unlock()
		perPID := map[string]int{}
		found := false
		for _, l := range got {
			m := re.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if !strings.Contains(l, `"mcpserver"="ns/srv"`) {
				return false, StopTrying("stderr log without the resource: " + l)
			}
			perPID[m[1]]++
			if strings.Contains(m[2], `\n`) {
				return false, StopTrying("a log entry holds several lines: " + l)
			}
			if strings.Contains(m[2], "flag provided but not defined: -no-such-flag") {
				found = true
			}
		}
		for pid, n := range perPID {
			if n > stderrLinesPerSecond {
				return false, StopTrying(fmt.Sprintf("child %s: %d stderr lines logged, over the %d/s limit", pid, n, stderrLinesPerSecond))
			}
		}
		return found, nil
	}, eventually, 10*time.Millisecond).Should(BeTrue(), func() string {
		return "stderr line not logged; log: " + strings.Join(got, "\n")
	})
}
