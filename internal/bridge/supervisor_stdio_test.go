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

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// ---------------------------------------------------------------------------
// Helpers (prefixed stdio… to stay clear of other files of the package).

// stdioLog logs to t until the test ends and drops what comes later (a
// child's stderr can still be read after Dispose returned).
func stdioLog(t *testing.T) logr.Logger {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: 1})
}

func stdioCount(evs []fixture.Event, kind, tool string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind && (tool == "" || e.Tool == tool) {
			n++
		}
	}
	return n
}

func stdioStarts(evs []fixture.Event) []int {
	var pids []int
	for _, e := range evs {
		if e.Kind == fixture.EventStart {
			pids = append(pids, e.PID)
		}
	}
	return pids
}

// stdioGone reports whether pid no longer exists at all (reaped).
func stdioGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// stdioWaitGone waits until pid is reaped.
func stdioWaitGone(t *testing.T, pid int, what string) {
	t.Helper()
	NewWithT(t).Eventually(func() bool { return stdioGone(pid) }, eventually, 5*time.Millisecond).Should(BeTrue(), func() string {
		st, ppid, _ := stdioProcStat(pid)
		return fmt.Sprintf("%s (pid %d) still exists: state %c, ppid %d", what, pid, st, ppid)
	})
}

// stdioProcStat reads the state letter and parent of pid from /proc.
func stdioProcStat(pid int) (state byte, ppid int, ok bool) {
	st, err := proc.ReadStat(pid)
	return st.State, st.PPID, err == nil
}

// stdioKillQuietly makes sure a process the test stopped or started does
// not outlive it.
func stdioKillQuietly(pid int) {
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stdioCallPID asks the live generation for its process id.
func stdioCallPID(t *testing.T, s *Supervisor) int {
	t.Helper()
	res, err := s.CallTool(context.Background(), fixture.ToolPID, map[string]any{})
	if err != nil {
		t.Fatalf("pid tool: %v", err)
	}
	return pidOf(t, res)
}

// stdioRecorder samples the snapshot every few milliseconds, keeping each
// distinct state with the time it was first seen, so that tests can check
// the whole history and not only the end state.
type stdioRecorder struct {
	mu     sync.Mutex
	states []stdioState
	stop   chan struct{}
	done   chan struct{}
}

type stdioState struct {
	at  time.Time
	key string
	sn  Snapshot
}

func stdioRecord(t *testing.T, s *Supervisor) *stdioRecorder {
	r := &stdioRecorder{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			sn := s.Snapshot()
			le := ""
			if sn.LastError != nil {
				le = sn.LastError.Error()
			}
			key := fmt.Sprintf("%s|%s|%d|%d|%d|%v|%s|%d", sn.Phase, sn.Reason, sn.Generation, sn.Attempt, sn.FailedAttempts, sn.RetryDelay, le, len(sn.Tools))
			r.mu.Lock()
			if n := len(r.states); n == 0 || r.states[n-1].key != key {
				r.states = append(r.states, stdioState{at: time.Now(), key: key, sn: sn})
			}
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-tick.C:
			case <-s.Changes():
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *stdioRecorder) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

func (r *stdioRecorder) history() []stdioState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// generationStarts is when each generation number was first seen.
func (r *stdioRecorder) generationStarts() map[int64]time.Time {
	out := map[int64]time.Time{}
	for _, st := range r.history() {
		if _, ok := out[st.sn.Generation]; !ok {
			out[st.sn.Generation] = st.at
		}
	}
	return out
}

// stdioRegistryWatch records the smallest number of tools of ns a reader
// of the registry could have seen once the first tools were published
// (min is -1 until then), and how many changes there were.
type stdioRegistryWatch struct {
	min     atomic.Int64
	changes atomic.Int64
	stop    chan struct{}
	done    chan struct{}
}

func stdioWatchRegistry(t *testing.T, reg *registry.Registry, ns string) *stdioRegistryWatch {
	w := &stdioRegistryWatch{stop: make(chan struct{}), done: make(chan struct{})}
	w.min.Store(-1)
	if n := int64(len(reg.Tools(ns))); n > 0 {
		w.min.Store(n)
	}
	sub := reg.Subscribe()
	go func() {
		defer close(w.done)
		defer sub.Close()
		for {
			select {
			case <-w.stop:
				return
			case <-sub.C:
				sub.Drain()
				w.changes.Add(1)
				n := int64(len(reg.Tools(ns)))
				if m := w.min.Load(); (m < 0 && n > 0) || (m >= 0 && n < m) {
					w.min.Store(n)
				}
			}
		}
	}()
	t.Cleanup(func() { w.close() })
	return w
}

func (w *stdioRegistryWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// stdioFakeDialer connects generations to an in-process go-sdk server over
// in-memory transports. It counts dials; with neverClosed its links never
// report closed until release (the end of the test).
type stdioFakeDialer struct {
	srv         *mcp.Server
	neverClosed bool

	mu    sync.Mutex
	dials int
	links []*stdioFakeLink
}

func (d *stdioFakeDialer) dial(ctx context.Context, _ func(error)) (link, error) {
	ct, st := mcp.NewInMemoryTransports()
	ss, err := d.srv.Connect(context.Background(), st, nil)
	if err != nil {
		return nil, err
	}
	l := &stdioFakeLink{t: ct, ss: ss, closedCh: make(chan struct{}), neverClosed: d.neverClosed}
	d.mu.Lock()
	d.dials++
	d.links = append(d.links, l)
	d.mu.Unlock()
	return l, nil
}

func (d *stdioFakeDialer) dialCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// release reports every link closed, so that nothing waits on them after
// the test (goleak).
func (d *stdioFakeDialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.links {
		l.closeOnce.Do(func() { _ = l.ss.Close() })
		l.releaseOnce.Do(func() { close(l.closedCh) })
	}
}

type stdioFakeLink struct {
	t           mcp.Transport
	ss          *mcp.ServerSession
	closedCh    chan struct{}
	neverClosed bool
	closeOnce   sync.Once
	releaseOnce sync.Once
}

func (l *stdioFakeLink) transport() mcp.Transport { return l.t }

func (l *stdioFakeLink) close() {
	l.closeOnce.Do(func() {
		_ = l.ss.Close()
		if !l.neverClosed {
			l.releaseOnce.Do(func() { close(l.closedCh) })
		}
	})
}

func (l *stdioFakeLink) closed() <-chan struct{} { return l.closedCh }

// stdioFakeServer is an in-process MCP server whose initialize and
// tools/list can be made to stall; stalls end with the test.
type stdioFakeServer struct {
	srv            *mcp.Server
	stallInit      atomic.Bool
	stallNextList  atomic.Bool
	listStalled    chan struct{} // receives when a tools/list request stalls
	testDone       chan struct{}
	listRequests   atomic.Int64
	initializeSeen atomic.Int64
}

func stdioNewFakeServer(t *testing.T, tools ...string) *stdioFakeServer {
	f := &stdioFakeServer{listStalled: make(chan struct{}, 16), testDone: make(chan struct{})}
	t.Cleanup(func() { close(f.testDone) })
	f.srv = mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1.0.0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	for _, name := range tools {
		f.addTool(name)
	}
	f.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "initialize", "server/discover":
				f.initializeSeen.Add(1)
				if f.stallInit.Load() {
					return nil, f.stall(ctx)
				}
			case "tools/list":
				f.listRequests.Add(1)
				if f.stallNextList.CompareAndSwap(true, false) {
					f.listStalled <- struct{}{}
					return nil, f.stall(ctx)
				}
			}
			return next(ctx, method, req)
		}
	})
	return f
}

func (f *stdioFakeServer) stall(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.testDone:
		return errors.New("test over")
	}
}

func (f *stdioFakeServer) addTool(name string) {
	f.srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

func stdioWithDialer(d dialer) func(*Options) {
	return func(o *Options) { o.dialer = d }
}

// stdioStalledPolicy is a fixture that never answers initialize, with a
// connectionTimeoutMs budget.
func stdioStalledPolicy(budget time.Duration, args ...string) *policy.Policy {
	p := stdioPolicy(append([]string{"--stall-initialize"}, args...)...)
	p.ConnectionTimeout = budget
	return p
}

// ---------------------------------------------------------------------------
// One connectionTimeoutMs budget.
// See docs/design.md, "The connection budget".

// Seed matrix "Transport/connect never settles" + "Initialize stalls": the
// deadline aborts the attempt, names the budget and the stage, publishes
// nothing.
func TestStdioStalledInitializeFailsAfterConnectionBudgetWithStage(t *testing.T) {
	ev := eventsPath(t)
	p := stdioStalledPolicy(300*time.Millisecond, "--events-file="+ev)
	p.Reconnect.InitialDelay, p.Reconnect.MaxDelay = time.Minute, time.Minute // one attempt in view
	start := time.Now()
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "the first attempt to fail", func(sn Snapshot) bool { return sn.LastError != nil })
	elapsed := time.Since(start)
	t.Logf("stalled initialize: attempt failed %v after Start (budget 300ms; design target: acted on within 150ms of expiry)", elapsed)
	if sn.LastError.Stage != StageInitialize {
		t.Errorf("stage = %q, want %q", sn.LastError.Stage, StageInitialize)
	}
	if want := "connection and tool discovery timed out after 300ms"; sn.LastError.Message() != want {
		t.Errorf("message = %q, want %q", sn.LastError.Message(), want)
	}
	if !IsDeadline(sn.LastError) {
		t.Errorf("LastError %v is not a connection-budget deadline", sn.LastError)
	}
	if elapsed < 300*time.Millisecond {
		t.Errorf("attempt failed after %v, before its 300ms budget", elapsed)
	}
	if elapsed > 5*time.Second {
		t.Errorf("attempt failed after %v: the 300ms deadline was not acted on", elapsed)
	}
	if len(sn.Tools) != 0 || len(reg.Tools("ns")) != 0 {
		t.Errorf("tools published by a stalled server: %v / %v", sn.Tools, reg.Tools("ns"))
	}
	if sn.Phase == v1alpha1.PhaseReady {
		t.Errorf("phase Ready after a failed attempt")
	}
	// The timed-out generation was closed (its child ended and was reaped)
	// although the next attempt is a minute away.
	evs := waitEvents(t, ev, "the child's exit", func(e []fixture.Event) bool { return stdioCount(e, fixture.EventExit, "") == 1 })
	stdioWaitGone(t, stdioStarts(evs)[0], "the timed-out child")
}

// Seed matrix "Page 2 of tools/list stalls": the shared deadline aborts the
// fetch in page 2 and page 1 is never (partially) published.
func TestStdioStalledListPageTwoFailsAndPublishesNothing(t *testing.T) {
	p := stdioPolicy("--tools=30", "--page-size=10", "--stall-list-page=2")
	p.ConnectionTimeout = 500 * time.Millisecond
	p.Reconnect.InitialDelay, p.Reconnect.MaxDelay = time.Minute, time.Minute
	var watch *stdioRegistryWatch
	s, reg := startSupervisor(t, p, func(o *Options) {
		watch = stdioWatchRegistry(t, o.Registry, "ns") // before Start: sees every change
	})
	sn := waitFor(t, s, "the first attempt to fail", func(sn Snapshot) bool { return sn.LastError != nil })
	if want := StageToolsList(2); sn.LastError.Stage != want {
		t.Errorf("stage = %q, want %q", sn.LastError.Stage, want)
	}
	if want := "connection and tool discovery timed out after 500ms"; sn.LastError.Message() != want {
		t.Errorf("message = %q, want %q", sn.LastError.Message(), want)
	}
	if got := reg.Tools("ns"); len(got) != 0 {
		t.Errorf("registry holds %d tools after a failed fetch: page 1 was published", len(got))
	}
	if len(sn.Tools) != 0 {
		t.Errorf("snapshot tools after a failed fetch: %v", toolNames(sn.Tools))
	}
	if n := watch.changes.Load(); n != 0 {
		t.Errorf("the registry changed %d times during a fetch that failed", n)
	}
}

// One deadline covers every page of tools/list; it is not reset per
// page. Five pages of 150ms each under a 500ms budget must fail in a later
// page, though each page alone is well within the budget; with a budget
// that covers them all, the same server publishes.
// See docs/design.md, "The connection budget".
func TestStdioConnectionBudgetSpansAllToolsListPages(t *testing.T) {
	newServer := func() *mcp.Server {
		srv := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "1.0.0"}, &mcp.ServerOptions{PageSize: 1})
		for i := range 5 {
			srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%d", i), InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{}, nil
				})
		}
		srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "tools/list" {
					select {
					case <-time.After(150 * time.Millisecond):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return next(ctx, method, req)
			}
		})
		return srv
	}
	t.Run("budget shorter than all pages", func(t *testing.T) {
		d := &stdioFakeDialer{srv: newServer()}
		p := stdioPolicy()
		p.ConnectionTimeout = 500 * time.Millisecond
		p.Reconnect.InitialDelay, p.Reconnect.MaxDelay = time.Minute, time.Minute
		s, reg := startSupervisor(t, p, stdioWithDialer(d))
		t.Cleanup(d.release)
		sn := waitFor(t, s, "the attempt to fail", func(sn Snapshot) bool { return sn.LastError != nil || sn.Phase == v1alpha1.PhaseReady })
		if sn.Phase == v1alpha1.PhaseReady {
			t.Fatalf("5 pages of 150ms were published under a 500ms budget: the deadline is reset per page")
		}
		// Which page the deadline falls in depends on the machine's speed
		// (after the first on an idle one); that it falls in one at all,
		// where each page alone fits the budget, is the point.
		if !IsDeadline(sn.LastError) || !strings.HasPrefix(sn.LastError.Stage, "tools-list page ") {
			t.Errorf("lastError = %v, want the 500ms deadline in a tools-list page", sn.LastError)
		}
		t.Logf("deadline in %s", sn.LastError.Stage)
		if len(reg.Tools("ns")) != 0 {
			t.Errorf("pages fetched before the deadline were published")
		}
	})
	t.Run("budget covering all pages", func(t *testing.T) {
		d := &stdioFakeDialer{srv: newServer()}
		p := stdioPolicy()
		p.ConnectionTimeout = 10 * time.Second
		s, reg := startSupervisor(t, p, stdioWithDialer(d))
		t.Cleanup(d.release)
		waitFor(t, s, "Ready", isReady)
		if n := len(reg.Tools("ns")); n != 5 {
			t.Errorf("%d tools published, want 5", n)
		}
	})
}

// Seed matrix "Initial timeout with failOnStartupError: true": final, no
// retry.
func TestStdioInitialTimeoutWithFailOnStartupErrorIsFinal(t *testing.T) {
	p := stdioStalledPolicy(200 * time.Millisecond)
	p.FailOnStartupError = true
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.Reason != v1alpha1.ReasonStartupFailed {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonStartupFailed, sn.Message)
	}
	if !strings.Contains(sn.Message, "timed out after 200ms") {
		t.Errorf("message %q does not carry the timeout as cause", sn.Message)
	}
	if sn.LastError == nil || sn.LastError.Stage != StageInitialize {
		t.Errorf("lastError = %v, want stage %s", sn.LastError, StageInitialize)
	}
	// The supervisor stopped: a retry (20ms delay) would show.
	NewWithT(t).Consistently(s.Snapshot, 300*time.Millisecond, 10*time.Millisecond).Should(SatisfyAll(
		HaveField("Generation", BeEquivalentTo(1)), HaveField("Phase", v1alpha1.PhaseFailed)), "a retry after StartupFailed")
	if len(reg.Tools("ns")) != 0 {
		t.Errorf("tools registered after StartupFailed")
	}
}

// FailOnStartupError only concerns the first attempt: a connection
// that was up once reconnects normally after a loss.
// See docs/design.md, "Startup".
func TestStdioFailOnStartupErrorDoesNotStopLaterReconnects(t *testing.T) {
	p := stdioPolicy()
	p.FailOnStartupError = true
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	if err := syscall.Kill(stdioCallPID(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sn := waitFor(t, s, "generation 2 Ready", func(sn Snapshot) bool {
		return sn.Phase == v1alpha1.PhaseFailed || (sn.Generation == 2 && sn.Phase == v1alpha1.PhaseReady)
	})
	if sn.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("a loss after a successful start stopped the supervisor: %s: %s", sn.Reason, sn.Message)
	}
}

// A reconnect that recovers an unchanged tool list changes nothing in
// the registry: no change signal, identical entries.
// See docs/design.md, "Tool sync".
func TestStdioReconnectWithUnchangedToolsLeavesRegistryUntouched(t *testing.T) {
	s, reg := startSupervisor(t, stdioPolicy("--tools=5"))
	waitFor(t, s, "Ready", isReady)
	before := reg.Tools("ns")
	watch := stdioWatchRegistry(t, reg, "ns")
	if err := syscall.Kill(stdioCallPID(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "generation 2 Ready", func(sn Snapshot) bool { return sn.Generation == 2 && sn.Phase == v1alpha1.PhaseReady })
	watch.close()
	if n := watch.changes.Load(); n != 0 {
		t.Errorf("%d registry change signals across a reconnect with an unchanged list", n)
	}
	after := reg.Tools("ns")
	if len(after) != len(before) {
		t.Fatalf("%d tools before, %d after", len(before), len(after))
	}
	for i := range after {
		if after[i].Name != before[i].Name || after[i].Upstream() != before[i].Upstream() {
			t.Errorf("entry %d replaced: %s", i, after[i].Name)
		}
	}
}

// Seed matrix "Initial timeout with failOnStartupError: false": the normal
// reconnect policy applies.
func TestStdioInitialTimeoutWithoutFailOnStartupErrorRetries(t *testing.T) {
	p := stdioStalledPolicy(200 * time.Millisecond)
	p.FailOnStartupError = false
	s, _ := startSupervisor(t, p)
	sn := waitFor(t, s, "a third generation", func(sn Snapshot) bool { return sn.Generation >= 3 || sn.Phase == v1alpha1.PhaseFailed })
	if sn.Generation < 3 {
		t.Fatalf("supervisor stopped after an initial timeout: %+v", sn)
	}
	if sn.Phase == v1alpha1.PhaseFailed && sn.Reason == v1alpha1.ReasonStartupFailed {
		t.Fatalf("StartupFailed with failOnStartupError=false")
	}
	if sn.FailedAttempts < 2 {
		t.Errorf("failedAttempts = %d after %d generations", sn.FailedAttempts, sn.Generation)
	}
}

// Seed matrix "Reconnect generation stalls": every generation gets a fresh
// budget (none fails early on a spent shared deadline), every timeout is
// one failed attempt, and the budget of attempts runs out as usual.
func TestStdioEveryReconnectGenerationGetsAFreshBudget(t *testing.T) {
	const budget = 300 * time.Millisecond
	p := stdioStalledPolicy(budget)
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 3}
	started := time.Now() // generation 1 starts before the recorder can see it
	s, _ := startSupervisor(t, p)
	rec := stdioRecord(t, s)
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	rec.close()
	if sn.Reason != v1alpha1.ReasonReconnectExhausted {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonReconnectExhausted, sn.Message)
	}
	if sn.Generation != 3 {
		t.Errorf("generations = %d, want 3 (maxAttempts 3, the first attempt included)", sn.Generation)
	}
	if sn.FailedAttempts != 3 {
		t.Errorf("failedAttempts = %d, want 3", sn.FailedAttempts)
	}
	starts := rec.generationStarts()
	starts[1] = started
	for g := int64(1); g < 3; g++ {
		a, ok1 := starts[g]
		b, ok2 := starts[g+1]
		if !ok1 || !ok2 {
			t.Fatalf("generation %d or %d never observed: %v", g, g+1, starts)
		}
		t.Logf("generation %d lasted %v (budget %v)", g, b.Sub(a), budget)
		if b.Sub(a) < budget {
			t.Errorf("generation %d failed %v after it started, before its own %v budget: budgets are shared", g, b.Sub(a), budget)
		}
	}
	// Failed attempts counted up one per generation.
	last := 0
	for _, st := range rec.history() {
		if st.sn.FailedAttempts < last {
			t.Errorf("failedAttempts went down within one outage: %d -> %d", last, st.sn.FailedAttempts)
		}
		last = st.sn.FailedAttempts
		if le := st.sn.LastError; le != nil && le.Stage != StageClose {
			if le.Stage != StageInitialize || le.Message() != "connection and tool discovery timed out after 300ms" {
				t.Errorf("generation %d: lastError %v", st.sn.Generation, le)
			}
		}
	}
}

// List_changed triggers a re-sync that publishes the new tool; the
// previous set stays published while the fetch runs (no empty moment), and
// the connection is not replaced.
// See docs/design.md, "Tool sync".
func TestStdioListChangedResyncPublishesNewToolWithoutDroppingOld(t *testing.T) {
	p := stdioPolicy("--tools=3", "--list-changed-after=1500ms")
	var watch *stdioRegistryWatch
	s, reg := startSupervisor(t, p, func(o *Options) { watch = stdioWatchRegistry(t, o.Registry, "ns") })
	sn := waitFor(t, s, "Ready", isReady)
	first := len(sn.Tools)
	if hasTool(sn.Tools, fixture.ToolLate) {
		t.Fatalf("late_tool already listed at first connect (connect took over 1.5s?)")
	}
	if first != 3+len(fixture.BuiltinTools) {
		t.Fatalf("first sync published %d tools, want %d", first, 3+len(fixture.BuiltinTools))
	}
	sn = waitFor(t, s, "late_tool published", func(sn Snapshot) bool { return hasTool(sn.Tools, fixture.ToolLate) })
	if !hasTool(reg.Tools("ns"), fixture.ToolLate) {
		t.Fatalf("late_tool in the snapshot but not in the registry")
	}
	if len(sn.Tools) != first+1 {
		t.Errorf("after re-sync %d tools, want %d", len(sn.Tools), first+1)
	}
	if sn.Generation != 1 || sn.Phase != v1alpha1.PhaseReady {
		t.Errorf("re-sync replaced the connection: generation %d, phase %s", sn.Generation, sn.Phase)
	}
	watch.close()
	if m := watch.min.Load(); m < int64(first) {
		t.Errorf("a registry reader saw %d tools during the re-sync (had %d)", m, first)
	}
	res, err := s.CallTool(context.Background(), fixture.ToolLate, map[string]any{"text": "x"})
	if err != nil || !strings.HasPrefix(RenderText(res), "late_tool ") {
		t.Fatalf("call late_tool: %v %v", res, err)
	}
}

// Seed matrix "list_changed re-sync stalls": the last good tools remain
// registered during the stalled fetch and after its deadline; the deadline
// closes the generation, which reconnects and publishes the new list.
func TestStdioStalledResyncKeepsLastGoodToolsThenReconnects(t *testing.T) {
	fs := stdioNewFakeServer(t, "alpha", "beta")
	d := &stdioFakeDialer{srv: fs.srv}
	p := stdioPolicy()
	p.ConnectionTimeout = 300 * time.Millisecond
	var watch *stdioRegistryWatch
	s, reg := startSupervisor(t, p, stdioWithDialer(d), func(o *Options) { watch = stdioWatchRegistry(t, o.Registry, "ns") })
	t.Cleanup(d.release)
	sn := waitFor(t, s, "Ready", isReady)
	if got := toolNames(sn.Tools); !slices.Equal(got, []string{"mcp__fx__alpha", "mcp__fx__beta"}) {
		t.Fatalf("tools = %v", got)
	}
	rec := stdioRecord(t, s)
	fs.stallNextList.Store(true)
	triggered := time.Now() // the re-sync, and so its budget, starts after this
	fs.addTool("gamma")     // list_changed
	select {
	case <-fs.listStalled:
	case <-time.After(eventually):
		t.Fatal("list_changed did not trigger a tools/list")
	}
	stalledAt := time.Now()
	if got := toolNames(reg.Tools("ns")); !slices.Equal(got, []string{"mcp__fx__alpha", "mcp__fx__beta"}) {
		t.Fatalf("during the stalled re-sync the registry holds %v", got)
	}
	sn = waitFor(t, s, "generation 2 Ready with gamma", func(sn Snapshot) bool {
		return sn.Generation == 2 && sn.Phase == v1alpha1.PhaseReady && hasTool(sn.Tools, "gamma")
	})
	rec.close()
	watch.close()
	if m := watch.min.Load(); m < 2 {
		t.Errorf("a registry reader saw %d tools while the re-sync stalled and the server reconnected", m)
	}
	sawDeadline := false
	for _, st := range rec.history() {
		if le := st.sn.LastError; le != nil && le.Stage == StageToolsList(1) && IsDeadline(le) &&
			le.Message() == "connection and tool discovery timed out after 300ms" {
			if !sawDeadline {
				// The re-sync has its own fresh budget, started after the
				// list_changed that triggered it. One-sided: a budget left
				// over from the connect would have run out sooner.
				t.Logf("re-sync timed out %v after its request stalled, %v after the list_changed (budget 300ms)",
					st.at.Sub(stalledAt), st.at.Sub(triggered))
				if st.at.Sub(triggered) < p.ConnectionTimeout {
					t.Errorf("the re-sync timed out %v after the list_changed: not a fresh %v budget", st.at.Sub(triggered), p.ConnectionTimeout)
				}
			}
			sawDeadline = true
		}
	}
	if !sawDeadline {
		t.Errorf("the timed-out re-sync was never reported as lastError (stage tools-list page 1, budget 300ms)")
	}
	if d.dialCount() != 2 {
		t.Errorf("dials = %d, want 2", d.dialCount())
	}
}

// Seed matrix "Dispose during pending connect/discovery" (real stdio E2E):
// Dispose aborts a connect (stalled in initialize, or in tools/list page 2)
// whose budget is 60s at once, no retry follows, and the child is reaped.
func TestStdioDisposeDuringStalledConnectReturnsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"initialize", []string{"--stall-initialize"}},
		{"tools-list page 2", []string{"--tools=30", "--page-size=10", "--stall-list-page=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) { stdioDisposeDuringStall(t, tc.args) })
	}
}

func stdioDisposeDuringStall(t *testing.T, args []string) {
	ev := eventsPath(t)
	p := stdioPolicy(append(args, "--events-file="+ev)...)
	p.ConnectionTimeout = 60 * time.Second
	reg := registry.New()
	s := New(Options{Namespace: "ns", Name: "srv", Policy: p, Registry: reg, Log: stdioLog(t), CloseBarrier: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	evs := waitEvents(t, ev, "the child to start", func(e []fixture.Event) bool { return len(stdioStarts(e)) == 1 })
	pid := stdioStarts(evs)[0]
	t.Cleanup(func() { stdioKillQuietly(pid) })
	// Stalled in connect: still connecting, nothing failed.
	NewWithT(t).Consistently(s.Snapshot, 50*time.Millisecond, 5*time.Millisecond).Should(SatisfyAll(
		HaveField("Phase", v1alpha1.PhaseConnecting), HaveField("LastError", BeNil())), "not stalled in connect")
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	start := time.Now()
	if err := s.Dispose(dctx); err != nil {
		t.Fatalf("dispose: %v", err)
	}
	elapsed := time.Since(start)
	t.Logf("dispose during a connect stalled in %s (budget 60s) returned after %v (design target 200ms)", strings.Join(args, " "), elapsed)
	// Waiting for the budget would take 60 s; the design target (200 ms) is
	// the benchmark's to measure. See docs/design.md, "How it is tested".
	if elapsed >= p.ConnectionTimeout/2 {
		t.Errorf("dispose took %v: it waited for the %v connection budget", elapsed, p.ConnectionTimeout)
	}
	if !stdioGone(pid) {
		st, ppid, _ := stdioProcStat(pid)
		t.Errorf("child %d still exists after Dispose: state %c, ppid %d", pid, st, ppid)
	}
	NewWithT(t).Consistently(func() int64 { return s.Snapshot().Generation }, 200*time.Millisecond, 10*time.Millisecond).
		Should(BeEquivalentTo(1), "a retry was started after dispose")
	if n := len(stdioStarts(mustEvents(t, ev))); n != 1 {
		t.Errorf("%d children started, want 1", n)
	}
}

func mustEvents(t *testing.T, path string) []fixture.Event {
	t.Helper()
	evs, err := fixture.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// ---------------------------------------------------------------------------
// Backoff and the attempt budget over real children.
// See docs/design.md, "Backoff and the attempt budget".

// A crash-looping server whose connects succeed briefly spends its budget;
// its tools are then unregistered.
func TestStdioCrashLoopWithBriefConnectsExhaustsBudgetAndUnregisters(t *testing.T) {
	p := stdioPolicy("--crash-after-initialize")
	// MaxDelay (the stability window) far above how long a crashing child
	// stays up, whatever the machine's load.
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 10 * time.Millisecond, MaxDelay: 3 * time.Second, MaxAttempts: 4}
	s, reg := startSupervisor(t, p)
	rec := stdioRecord(t, s)
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	rec.close()
	if sn.Reason != v1alpha1.ReasonReconnectExhausted {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonReconnectExhausted, sn.Message)
	}
	if sn.Generation != 4 || sn.FailedAttempts != 4 {
		t.Errorf("generation %d, failedAttempts %d; want 4, 4: every brief connection is a failed attempt, the first included",
			sn.Generation, sn.FailedAttempts)
	}
	if got := reg.Tools("ns"); len(got) != 0 {
		t.Errorf("tools still registered after ReconnectExhausted: %v", toolNames(got))
	}
	if len(sn.Tools) != 0 {
		t.Errorf("snapshot tools after ReconnectExhausted: %v", toolNames(sn.Tools))
	}
	ready := 0
	for _, st := range rec.history() {
		if st.sn.Phase == v1alpha1.PhaseReady {
			ready++
		}
	}
	if ready == 0 {
		t.Errorf("no generation ever connected: not a crash loop of brief connects")
	}
	_, err := s.CallTool(context.Background(), "echo", nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), v1alpha1.ReasonReconnectExhausted) {
		t.Errorf("call after exhaustion: %v", err)
	}
}

// A command that cannot start fails in stage transport-start and exhausts
// the budget after maxAttempts attempts, the first one included.
func TestStdioCommandThatCannotStartExhaustsBudget(t *testing.T) {
	p := stdioPolicy()
	p.Stdio.Command = filepath.Join(t.TempDir(), "no-such-server")
	p.Reconnect.MaxAttempts = 3
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.Reason != v1alpha1.ReasonReconnectExhausted {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonReconnectExhausted, sn.Message)
	}
	if sn.Generation != 3 || sn.FailedAttempts != 3 {
		t.Errorf("generation %d, failedAttempts %d; want 3, 3", sn.Generation, sn.FailedAttempts)
	}
	if sn.LastError == nil || sn.LastError.Stage != StageTransportStart || !strings.Contains(sn.LastError.Message(), "no-such-server") {
		t.Errorf("lastError = %v, want stage %s naming the command", sn.LastError, StageTransportStart)
	}
	if len(reg.Tools("ns")) != 0 {
		t.Errorf("tools registered")
	}
	if want := "Gave up after 3 consecutive failed attempts (reconnect.maxAttempts is 3)"; !strings.HasPrefix(sn.Message, want) {
		t.Errorf("message %q, want it to start with %q", sn.Message, want)
	}
}

// Reconnect.enabled=false: a lost connection keeps the tools registered
// but failing, phase Failed / ReconnectDisabled; calls fail fast.
// See docs/design.md, "Backoff and the attempt budget".
func TestStdioReconnectDisabledKeepsToolsRegisteredButFailing(t *testing.T) {
	p := stdioPolicy("--tools=2")
	p.Reconnect.Enabled = false
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "Ready", isReady)
	published := toolNames(sn.Tools)
	pid := stdioCallPID(t, s)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sn = waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.Reason != v1alpha1.ReasonReconnectDisabled {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonReconnectDisabled, sn.Message)
	}
	NewWithT(t).Consistently(func() []string { return toolNames(reg.Tools("ns")) }, 100*time.Millisecond, 10*time.Millisecond).
		Should(Equal(published), "the registry after a loss with reconnect disabled keeps the last good tools")
	if got := toolNames(s.Snapshot().Tools); !slices.Equal(got, published) {
		t.Errorf("snapshot tools = %v, want %v", got, published)
	}
	start := time.Now()
	_, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "x"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("call after loss: %v, want ErrUnavailable", err)
	}
	if el := time.Since(start); el >= p.ToolCallTimeout {
		t.Errorf("call took %v, want fail-fast, not its %v timeout", el, p.ToolCallTimeout)
	}
	if !strings.Contains(err.Error(), v1alpha1.ReasonReconnectDisabled) {
		t.Errorf("call error %q does not give the reason", err)
	}
	if g := s.Snapshot().Generation; g != 1 {
		t.Errorf("generation %d: reconnected although disabled", g)
	}
}

// With reconnect disabled a loss is final at once: the phase goes from
// Ready to Failed / ReconnectDisabled while the lost server is still being
// ended, and never passes through Reconnecting. The server's shell outlives
// the fixture and ignores SIGTERM, so that the close takes two graces: a
// Reconnecting that lasted until the close was done would be seen.
// See docs/design.md, "Backoff and the attempt budget".
func TestStdioReconnectDisabledLossGoesStraightToFailed(t *testing.T) {
	const grace = 500 * time.Millisecond
	p := stdioPolicy()
	p.Reconnect.Enabled = false
	p.HealthCheckInterval = time.Second // finds the loss: the shell holds the pipes open
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, fixtureBin, "--ignore-sigterm"}
	s, _ := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = grace })
	ready := waitFor(t, s, "Ready", isReady)
	g := NewWithT(t)
	g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonConnected))
	fx := stdioCallPID(t, s)
	_, leader, ok := stdioProcStat(fx)
	if !ok {
		t.Fatal("fixture pid not found")
	}
	t.Cleanup(func() { stdioKillQuietly(leader) })
	rec := stdioRecord(t, s)
	if err := syscall.Kill(fx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	g.Expect(sn.Reason).To(Equal(v1alpha1.ReasonReconnectDisabled), sn.Message)
	g.Expect(sn.LastError).NotTo(BeNil())
	g.Expect(sn.LastError.Stage).To(Equal(StageHealthCheck))
	select { // a stopped supervisor ends once its last generation has closed
	case <-s.Closed():
	case <-time.After(eventually):
		t.Fatal("the supervisor did not end after its final loss")
	}
	g.Expect(stdioGone(leader)).To(BeTrue(), "the lost server's shell outlived its generation")
	rec.close()
	var phases []v1alpha1.Phase
	for _, st := range rec.history() {
		if n := len(phases); n == 0 || phases[n-1] != st.sn.Phase {
			phases = append(phases, st.sn.Phase)
		}
	}
	g.Expect(phases).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseReady, v1alpha1.PhaseFailed}))
	g.Expect(s.Snapshot().Reason).To(Equal(v1alpha1.ReasonReconnectDisabled), "the close within the barrier changes no reason")
}

// Through the supervisor: the failed first connection is attempt 1 of the
// outage; the delay before reconnect k (attempt k+1) is
// min(max, initial*2^(k-1)), on the injected clock; the budget ends it.
func TestStdioBackoffDelaySequenceOnFakeClock(t *testing.T) {
	ms := time.Millisecond
	p := stdioPolicy("--no-such-flag") // a real child that exits at once
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 20 * ms, MaxDelay: 200 * ms, MaxAttempts: 7}
	fc := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	s, reg := startSupervisor(t, p, func(o *Options) { o.Clock = fc })
	g := NewWithT(t)
	want := []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}
	for i, w := range want {
		n := i + 2 // the attempt within the outage
		var sn Snapshot
		g.Eventually(func() (bool, error) {
			sn = s.Snapshot()
			if sn.Phase == v1alpha1.PhaseFailed {
				return false, StopTrying("the supervisor stopped")
			}
			return fc.HasWaiters() && sn.Attempt == n, nil
		}, eventually, 2*time.Millisecond).Should(BeTrue(), func() string {
			return fmt.Sprintf("waiting for attempt %d to be scheduled: %+v", n, sn)
		})
		if sn.RetryDelay != w {
			t.Errorf("attempt %d: delay %v, want %v", n, sn.RetryDelay, w)
		}
		if !sn.NextRetry.Equal(fc.Now().Add(w)) {
			t.Errorf("attempt %d: nextRetry %v, want now+%v", n, sn.NextRetry, w)
		}
		if sn.Generation != int64(n-1) || sn.FailedAttempts != n-1 {
			t.Errorf("attempt %d: generation %d, failedAttempts %d; want %d, %d", n, sn.Generation, sn.FailedAttempts, n-1, n-1)
		}
		if sn.Phase != v1alpha1.PhaseConnecting && sn.Phase != v1alpha1.PhaseReconnecting {
			t.Errorf("attempt %d: phase %s", n, sn.Phase)
		}
		// A step short of the delay must not start the attempt.
		fc.Step(w - time.Millisecond)
		g.Consistently(func() int64 { return s.Snapshot().Generation }, 20*time.Millisecond, 2*time.Millisecond).
			Should(BeEquivalentTo(n-1), "attempt %d started before its delay elapsed", n)
		fc.Step(time.Millisecond)
	}
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.Reason != v1alpha1.ReasonReconnectExhausted || sn.Generation != 7 || sn.FailedAttempts != 7 {
		t.Fatalf("after the budget: %s/%s generation %d, failedAttempts %d; want Failed/%s, 7, 7",
			sn.Phase, sn.Reason, sn.Generation, sn.FailedAttempts, v1alpha1.ReasonReconnectExhausted)
	}
	if fc.HasWaiters() {
		t.Errorf("a retry is still scheduled after ReconnectExhausted")
	}
	if len(reg.Tools("ns")) != 0 {
		t.Errorf("tools registered")
	}
}

// The attempt budget says one thing everywhere: maxAttempts consecutive
// failed attempts per outage, the first connection at startup included and
// a connection lost inside the stability window counted as one. Snapshot,
// events and the final message agree, and failedAttempts never exceeds
// maxAttempts, for an outage that starts at startup and one that starts
// with the loss of a stable connection, dead or crash-looping.
func TestStdioAttemptBudgetIsTheSameInSnapshotEventsAndMessage(t *testing.T) {
	const maxAttempts = 2
	for _, tc := range []struct {
		name string
		// first is the fixture's argument on the first start, later on
		// every later one; empty first means later from the start.
		first, later string
		wantGen      int64
		wantAttempts []string // the attempt n/max of each Reconnecting event
	}{
		{"dead from startup", "", "--no-such-flag", 2, []string{"2/2"}},
		{"crash loop from startup", "", "--crash-after-initialize", 2, []string{"2/2"}},
		{"dead after a stable connection", "--exit-after=1500ms", "--no-such-flag", 3, []string{"1/2", "2/2"}},
		{"crash loop after a stable connection", "--exit-after=1500ms", "--crash-after-initialize", 3, []string{"1/2", "2/2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := filepath.Join(t.TempDir(), "count")
			first := tc.first
			if first == "" {
				first = tc.later
			}
			script := `n=$(cat "` + counter + `" 2>/dev/null || echo 0); echo $((n+1)) > "` + counter + `"
if [ "$n" -eq 0 ]; then exec "$0" ` + first + `; fi
exec "$0" ` + tc.later
			p := stdioPolicy()
			p.Stdio.Command, p.Stdio.Args = "/bin/sh", []string{"-c", script, fixtureBin}
			// The stability window (maxDelay) is far shorter than the first
			// connection's 1.5 s and far longer than a crashing child's life.
			p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 10 * time.Millisecond, MaxDelay: 300 * time.Millisecond, MaxAttempts: maxAttempts}
			s, reg := startSupervisor(t, p)
			rec := stdioRecord(t, s)
			sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
			rec.close()
			if sn.Reason != v1alpha1.ReasonReconnectExhausted {
				t.Fatalf("reason %q, want %q (%s)", sn.Reason, v1alpha1.ReasonReconnectExhausted, sn.Message)
			}
			if sn.FailedAttempts != maxAttempts || sn.Generation != tc.wantGen {
				t.Errorf("failedAttempts %d, generation %d; want %d, %d", sn.FailedAttempts, sn.Generation, maxAttempts, tc.wantGen)
			}
			want := "Gave up after 2 consecutive failed attempts (reconnect.maxAttempts is 2); tools unregistered"
			if sn.Message != want {
				t.Errorf("message %q, want %q", sn.Message, want)
			}
			for _, st := range rec.history() {
				if st.sn.FailedAttempts > maxAttempts {
					t.Errorf("generation %d: failedAttempts %d over maxAttempts %d", st.sn.Generation, st.sn.FailedAttempts, maxAttempts)
				}
				// A scheduled retry is the attempt after the failed ones (a
				// running one may already be counted as failed).
				if st.sn.RetryDelay > 0 && st.sn.Attempt != st.sn.FailedAttempts+1 {
					t.Errorf("generation %d: attempt %d scheduled after %d failed attempts", st.sn.Generation, st.sn.Attempt, st.sn.FailedAttempts)
				}
				if st.sn.Attempt > st.sn.FailedAttempts+1 {
					t.Errorf("generation %d: attempt %d after only %d failed attempts", st.sn.Generation, st.sn.Attempt, st.sn.FailedAttempts)
				}
			}
			var attempts []string
			exhausted := ""
			for _, e := range s.DrainEvents() {
				switch e.Reason {
				case v1alpha1.ReasonReconnecting:
					m := regexp.MustCompile(`\(attempt (\d+/\d+)\)`).FindStringSubmatch(e.Message)
					if m == nil {
						t.Errorf("Reconnecting event without attempt n/max: %q", e.Message)
						continue
					}
					attempts = append(attempts, m[1])
				case v1alpha1.ReasonReconnectExhausted:
					exhausted = e.Message
				}
			}
			if !slices.Equal(attempts, tc.wantAttempts) {
				t.Errorf("Reconnecting events numbered %v, want %v", attempts, tc.wantAttempts)
			}
			if exhausted != want {
				t.Errorf("ReconnectExhausted event %q, want %q", exhausted, want)
			}
			if len(reg.Tools("ns")) != 0 {
				t.Errorf("tools still registered after ReconnectExhausted")
			}
		})
	}
}

// Stability window with a real clock: a server that stays up longer
// than maxDelay and then dies starts a fresh budget every time; it never
// exhausts even after more losses than maxAttempts.
// See docs/design.md, "Backoff and the attempt budget".
func TestStdioStableConnectionsStartAFreshBudgetEachLoss(t *testing.T) {
	p := stdioPolicy("--exit-after=700ms")
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 2}
	s, _ := startSupervisor(t, p)
	rec := stdioRecord(t, s)
	sn := waitFor(t, s, "generation 5", func(sn Snapshot) bool { return sn.Generation >= 5 || sn.Phase == v1alpha1.PhaseFailed })
	rec.close()
	if sn.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("exhausted although every connection outlived the stability window: %s: %s", sn.Reason, sn.Message)
	}
	maxAttempt, scheduled := 0, 0
	for _, st := range rec.history() {
		if st.sn.Attempt > 0 && st.sn.RetryDelay > 0 {
			scheduled++
		}
		maxAttempt = max(maxAttempt, st.sn.Attempt)
		if st.sn.Attempt > 1 || st.sn.FailedAttempts > 1 {
			t.Errorf("generation %d: attempt %d, failedAttempts %d; want a fresh budget (attempt 1)", st.sn.Generation, st.sn.Attempt, st.sn.FailedAttempts)
		}
	}
	if scheduled == 0 || maxAttempt != 1 {
		t.Errorf("no reconnect attempt 1 observed (max attempt %d)", maxAttempt)
	}
}

// FailedAttempts counts the failed attempts of the current
// outage, and a connection that stays up maxDelay closes the outage. After
// a recovery that then stays up well past maxDelay there is no outage any
// more, so a Ready server must not keep reporting failed attempts.
// See docs/design.md, "Status and conditions" and "Backoff and the attempt budget".
func TestStdioFailedAttemptsClearedOnceRecoveredConnectionIsStable(t *testing.T) {
	counter := filepath.Join(t.TempDir(), "count")
	// Start 0 behaves; starts 1 and 2 fail at once (bad flag); later ones behave.
	script := `n=$(cat "` + counter + `" 2>/dev/null || echo 0); echo $((n+1)) > "` + counter + `"
if [ "$n" -eq 1 ] || [ "$n" -eq 2 ]; then exec "$0" --no-such-flag; fi
exec "$0" "$@"`
	p := stdioPolicy()
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", script, fixtureBin}
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 5}
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	if err := syscall.Kill(stdioCallPID(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sn := waitFor(t, s, "generation 4 Ready", func(sn Snapshot) bool { return sn.Generation == 4 && sn.Phase == v1alpha1.PhaseReady })
	t.Logf("recovered in generation %d with failedAttempts %d", sn.Generation, sn.FailedAttempts)
	// Stable for far longer than maxDelay (200ms), the outage is closed.
	NewWithT(t).Eventually(func() (int, error) {
		sn = s.Snapshot()
		if sn.Generation != 4 || sn.Phase != v1alpha1.PhaseReady {
			return 0, StopTrying(fmt.Sprintf("connection not stable: %+v", sn))
		}
		return sn.FailedAttempts, nil
	}, 5*time.Second, 20*time.Millisecond).Should(BeZero(),
		"Ready and stable for 5s (maxDelay 200ms) but the closed outage's failed attempts are still reported")
}

// Close barrier: a timed-out generation that never reports closed
// stops the supervisor (Failed / CloseTimeout) instead of starting another.
// See docs/design.md, "Generations and the close barrier".
func TestStdioCloseTimeoutStopsReconnecting(t *testing.T) {
	fs := stdioNewFakeServer(t, "alpha")
	fs.stallInit.Store(true)
	d := &stdioFakeDialer{srv: fs.srv, neverClosed: true}
	p := stdioPolicy()
	p.ConnectionTimeout = 200 * time.Millisecond
	start := time.Now()
	s, reg := startSupervisor(t, p, stdioWithDialer(d), func(o *Options) { o.CloseBarrier = 500 * time.Millisecond })
	t.Cleanup(d.release)
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	t.Logf("CloseTimeout after %v (budget 200ms + barrier 500ms)", time.Since(start))
	if sn.Reason != v1alpha1.ReasonCloseTimeout {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonCloseTimeout, sn.Message)
	}
	if sn.LastError == nil || sn.LastError.Stage != StageClose {
		t.Errorf("lastError = %v, want stage %s", sn.LastError, StageClose)
	}
	if el := time.Since(start); el < 700*time.Millisecond {
		t.Errorf("CloseTimeout after %v, before budget+barrier", el)
	}
	NewWithT(t).Consistently(d.dialCount, 300*time.Millisecond, 10*time.Millisecond).
		Should(Equal(1), "a new generation was started while the previous one had not closed")
	if g := s.Snapshot().Generation; g != 1 {
		t.Errorf("generation %d, want 1", g)
	}
	if fs.initializeSeen.Load() == 0 {
		t.Errorf("the fake server never saw the handshake")
	}
	if len(reg.Tools("ns")) != 0 {
		t.Errorf("tools registered")
	}
}

// Close barrier on the loss path: a connection that is lost and whose
// transport never reports closed stops the supervisor with CloseTimeout; no
// second generation is dialled.
// See docs/design.md, "Generations and the close barrier".
func TestStdioLostGenerationThatNeverClosesStopsWithCloseTimeout(t *testing.T) {
	fs := stdioNewFakeServer(t, "alpha")
	d := &stdioFakeDialer{srv: fs.srv, neverClosed: true}
	s, _ := startSupervisor(t, stdioPolicy(), stdioWithDialer(d), func(o *Options) { o.CloseBarrier = 300 * time.Millisecond })
	t.Cleanup(d.release)
	waitFor(t, s, "Ready", isReady)
	d.mu.Lock()
	ss := d.links[0].ss
	d.mu.Unlock()
	_ = ss.Close() // the server hangs up; the link still never reports closed
	sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
	if sn.Reason != v1alpha1.ReasonCloseTimeout {
		t.Fatalf("reason = %q, want %q (%s)", sn.Reason, v1alpha1.ReasonCloseTimeout, sn.Message)
	}
	NewWithT(t).Consistently(d.dialCount, 200*time.Millisecond, 10*time.Millisecond).
		Should(Equal(1), "dials after a generation that never closed")
	if g := s.Snapshot().Generation; g != 1 {
		t.Errorf("generation %d, want 1", g)
	}
}

// Dispose reports a generation that outlives the close barrier instead of
// returning as if it had closed, and Closed tells when it finally has: here
// a child that ignores SIGTERM (the fixture exits on stdin EOF, its shell
// then sleeps with SIGTERM ignored) lives until SIGKILL, two graces of
// 600ms after the close began, well past a 300ms barrier.
func TestStdioDisposeReturnsCloseTimeoutWhileTheChildOutlivesTheBarrier(t *testing.T) {
	g := NewWithT(t)
	p := stdioPolicy()
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, fixtureBin, "--ignore-sigterm"}
	reg := registry.New()
	s := New(Options{Namespace: "ns", Name: "srv", Policy: p, Registry: reg, Log: stdioLog(t),
		CloseBarrier: 300 * time.Millisecond, TerminateGrace: 600 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	waitFor(t, s, "Ready", isReady)
	_, shell, ok := stdioProcStat(stdioCallPID(t, s))
	g.Expect(ok).To(BeTrue(), "the fixture's parent shell")
	t.Cleanup(func() { stdioKillQuietly(shell) })

	start := time.Now()
	err := s.Dispose(context.Background())
	took := time.Since(start)
	t.Logf("dispose returned after %v: %v", took, err)
	g.Expect(err).To(MatchError(ErrCloseTimeout))
	g.Expect(took).To(BeNumerically(">=", 300*time.Millisecond), "dispose returned before the barrier")
	// Dispose waits the barrier, not the child: it returned while the child
	// lives and Closed is still open (no upper bound on the time).
	g.Expect(stdioGone(shell)).To(BeFalse(), "the child must still live when the barrier passed")
	g.Expect(s.Closed()).NotTo(BeClosed(), "dispose waited for the child")
	g.Expect(reg.Tools("ns")).To(BeEmpty(), "tools outlived the disposal")

	g.Eventually(s.Closed(), eventually).Should(BeClosed())
	g.Expect(stdioGone(shell)).To(BeTrue(), "Closed before the child was reaped")
	t.Logf("closed %v after the dispose began", time.Since(start))
	g.Expect(s.Dispose(context.Background())).To(Succeed(), "a second Dispose finds it closed")
}

// The same with a link that never reports closed: Dispose times out at the
// barrier, and Closed waits for the link.
func TestDisposeOfALinkThatNeverClosesReturnsCloseTimeout(t *testing.T) {
	g := NewWithT(t)
	fs := stdioNewFakeServer(t, "alpha")
	d := &stdioFakeDialer{srv: fs.srv, neverClosed: true}
	reg := registry.New()
	s := New(Options{Namespace: "ns", Name: "srv", Policy: stdioPolicy(), Registry: reg, Log: stdioLog(t),
		CloseBarrier: 200 * time.Millisecond, dialer: d})
	t.Cleanup(d.release)
	s.Start(context.Background())
	waitFor(t, s, "Ready", isReady)
	g.Expect(s.Dispose(context.Background())).To(MatchError(ErrCloseTimeout))
	g.Consistently(s.Closed(), 200*time.Millisecond).ShouldNot(BeClosed())
	d.release()
	g.Eventually(s.Closed(), eventually).Should(BeClosed())
}

// A new child is started only after the previous one was reaped. The
// children here outlive their close by a while (they ignore stdin EOF's
// effect and SIGTERM until SIGKILL), so starting the next one early would
// be seen.
// See docs/design.md, "Generations and the close barrier".
func TestStdioNeverTwoChildrenAliveAtOnce(t *testing.T) {
	marker := fmt.Sprintf("STDIO_TEST_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())
	name, value, _ := strings.Cut(marker, "=")
	ev := eventsPath(t)
	// The shell runs the stalled fixture; when stdin closes the fixture
	// exits and the shell becomes a sleep that ignores SIGTERM.
	p := stdioPolicy()
	p.Stdio.Command = "/bin/sh"
	p.Stdio.Args = []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, fixtureBin, "--stall-initialize", "--events-file=" + ev}
	p.Stdio.Env = []policy.EnvVar{{Name: name, Value: value}}
	p.ConnectionTimeout = 150 * time.Millisecond
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxAttempts: 100}
	w := fixture.WatchChildren(marker)
	t.Cleanup(w.Stop)
	s, _ := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = 100 * time.Millisecond })
	waitFor(t, s, "generation 5", func(sn Snapshot) bool { return sn.Generation >= 5 || sn.Phase == v1alpha1.PhaseFailed })
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Dispose(dctx); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	maxAlive, worst, distinct := w.Result()
	t.Logf("%d children observed, at most %d at once", distinct, maxAlive)
	if distinct < 4 {
		t.Fatalf("observed only %d children; the watch did not work", distinct)
	}
	if maxAlive > 1 {
		t.Errorf("%d children of one supervisor existed at once: %v", maxAlive, worst)
	}
	if sn := s.Snapshot(); sn.Phase == v1alpha1.PhaseFailed {
		t.Errorf("supervisor failed: %s: %s", sn.Reason, sn.Message)
	}
}

// With orderly exits: the fixture lifetimes in the events file never
// overlap across a loop of quickly dying children.
// See docs/design.md, "Generations and the close barrier".
func TestStdioExitLoopChildLifetimesNeverOverlap(t *testing.T) {
	ev := eventsPath(t)
	p := stdioPolicy("--exit-after=50ms", "--events-file="+ev)
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxAttempts: 100}
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "generation 8", func(sn Snapshot) bool { return sn.Generation >= 8 })
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Dispose(dctx); err != nil {
		t.Fatal(err)
	}
	evs := mustEvents(t, ev)
	lts := fixture.Lifetimes(evs)
	if len(lts) < 8 {
		t.Fatalf("only %d children recorded", len(lts))
	}
	for i, lt := range lts {
		// The last child may be aborted by Dispose before it can log its
		// exit; it must still be gone, and nothing started after it.
		if lt.End.IsZero() && i != len(lts)-1 {
			t.Errorf("child %d has no exit event", lt.PID)
		}
		if !stdioGone(lt.PID) {
			t.Errorf("child %d still exists after Dispose", lt.PID)
		}
	}
	if a, b, ok := fixture.Overlap(lts); ok {
		t.Errorf("children overlap: %+v and %+v", a, b)
	}
}

// ---------------------------------------------------------------------------
// registry.Tool calls over a real child.
// See docs/design.md, "Tool calls".

func TestStdioCallToolSendsTheRawNameUpstream(t *testing.T) {
	ev := eventsPath(t)
	s, reg := startSupervisor(t, stdioPolicy("--events-file="+ev))
	waitFor(t, s, "Ready", isReady)
	tool, caller, ok := reg.Lookup("ns", "mcp__fx__echo")
	if !ok {
		t.Fatal("mcp__fx__echo not published")
	}
	if tool.RawName != "echo" || caller == nil {
		t.Fatalf("lookup: %+v, caller %v", tool, caller)
	}
	res, err := caller.CallTool(context.Background(), tool.RawName, map[string]any{"text": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if got := RenderText(res); got != "hello" {
		t.Errorf("echo returned %q", got)
	}
	evs := waitEvents(t, ev, "the call event", func(e []fixture.Event) bool { return stdioCount(e, fixture.EventCall, "") > 0 })
	for _, e := range evs {
		if e.Kind == fixture.EventCall && e.Tool != "echo" {
			t.Errorf("upstream received tools/call for %q, want the raw name echo", e.Tool)
		}
	}
}

// toolCallTimeoutMs bounds a call, and the upstream sees the cancellation.
func TestStdioToolCallTimeoutIsEnforcedAndCancelsUpstream(t *testing.T) {
	ev := eventsPath(t)
	p := stdioPolicy("--events-file=" + ev)
	p.ToolCallTimeout = 200 * time.Millisecond
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	start := time.Now()
	_, err := s.CallTool(context.Background(), fixture.ToolSleep, map[string]any{"ms": 5000})
	elapsed := time.Since(start)
	t.Logf("call with a 200ms timeout returned after %v", elapsed)
	if err == nil || !strings.Contains(err.Error(), "timed out after 200ms") {
		t.Fatalf("err = %v, want a message with \"timed out after 200ms\"", err)
	}
	// One-sided: not before the configured timeout. That it did not wait
	// for the 5 s sleep is the error above and the cancellation below.
	if elapsed < p.ToolCallTimeout {
		t.Errorf("call returned after %v, before its %v timeout", elapsed, p.ToolCallTimeout)
	}
	waitEvents(t, ev, "cancelled sleep", func(e []fixture.Event) bool { return stdioCount(e, fixture.EventCancelled, fixture.ToolSleep) == 1 })
	// A slow tool is not a lost connection.
	if sn := s.Snapshot(); sn.Generation != 1 || sn.Phase != v1alpha1.PhaseReady {
		t.Errorf("after a call timeout: generation %d, phase %s", sn.Generation, sn.Phase)
	}
	if res, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "still"}); err != nil || RenderText(res) != "still" {
		t.Errorf("echo after a timeout: %v %v", res, err)
	}
}

// The caller's cancellation ends the call and reaches the upstream.
func TestStdioCallerCancellationCancelsUpstreamCall(t *testing.T) {
	ev := eventsPath(t)
	s, _ := startSupervisor(t, stdioPolicy("--events-file="+ev))
	waitFor(t, s, "Ready", isReady)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.CallTool(ctx, fixture.ToolSleep, map[string]any{"ms": 60000})
		errc <- err
	}()
	waitEvents(t, ev, "call sleep", func(e []fixture.Event) bool { return stdioCount(e, fixture.EventCall, fixture.ToolSleep) == 1 })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(eventually):
		t.Fatal("the call did not end on cancellation")
	}
	waitEvents(t, ev, "cancelled sleep", func(e []fixture.Event) bool { return stdioCount(e, fixture.EventCancelled, fixture.ToolSleep) == 1 })
	if sn := s.Snapshot(); sn.Generation != 1 || sn.Phase != v1alpha1.PhaseReady {
		t.Errorf("after a cancelled call: generation %d, phase %s", sn.Generation, sn.Phase)
	}
}

// isError results are tool errors, not successes.
func TestStdioToolIsErrorResultIsAToolError(t *testing.T) {
	s, _ := startSupervisor(t, stdioPolicy())
	waitFor(t, s, "Ready", isReady)
	res, err := s.CallTool(context.Background(), fixture.ToolFail, map[string]any{"text": "boom"})
	if err != nil {
		t.Fatalf("transport error for an isError result: %v", err)
	}
	terr := ResultError(res)
	var te *ToolError
	if !errors.As(terr, &te) {
		t.Fatalf("ResultError = %v, want *ToolError", terr)
	}
	if !strings.Contains(te.Error(), "boom") || te.Result != res {
		t.Errorf("tool error %q does not carry the result", te.Error())
	}
	ok, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "fine"})
	if err != nil || ResultError(ok) != nil {
		t.Errorf("a success is an error: %v %v", ok, err)
	}
}

// Content blocks are kept whole; the text rendering uses placeholders.
func TestStdioMediaResultKeepsBlocksAndRendersPlaceholders(t *testing.T) {
	s, _ := startSupervisor(t, stdioPolicy())
	waitFor(t, s, "Ready", isReady)
	res, err := s.CallTool(context.Background(), fixture.ToolMedia, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"media",
		"[image: image/png, content discarded]",
		"[audio: audio/wav, content discarded]",
		"[resource: fixture://media/embedded.txt, content discarded]",
		"[resource link: fixture://media/linked.txt]",
	}, "\n")
	if got := RenderText(res); got != want {
		t.Errorf("RenderText =\n%s\nwant\n%s", got, want)
	}
	if len(res.Content) != 5 {
		t.Fatalf("%d content blocks, want 5", len(res.Content))
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || len(img.Data) == 0 {
		t.Errorf("image block not kept whole: %#v", res.Content[1])
	}
	st, err := s.CallTool(context.Background(), fixture.ToolStructured, map[string]any{"text": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := st.StructuredContent.(map[string]any)
	if !ok || m["text"] != "abc" || m["length"] != float64(3) {
		t.Errorf("structuredContent = %#v", st.StructuredContent)
	}
}

// While reconnecting, calls fail at once with ErrUnavailable and
// the attempt; the last good tools stay registered; Dispose cancels the
// pending reconnect without waiting for its delay.
// See docs/design.md, "Backoff and the attempt budget" and "Tool calls".
func TestStdioCallToDownServerFailsFastWithReconnectAttempt(t *testing.T) {
	p := stdioPolicy("--tools=1")
	p.Reconnect.InitialDelay, p.Reconnect.MaxDelay = 30*time.Second, 30*time.Second
	reg := registry.New()
	s := New(Options{Namespace: "ns", Name: "srv", Policy: p, Registry: reg, Log: stdioLog(t), CloseBarrier: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	sn := waitFor(t, s, "Ready", isReady)
	published := toolNames(sn.Tools)
	pid := stdioCallPID(t, s)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Lost inside its 30s stability window, the first connection is the
	// outage's failed attempt 1; the retry is attempt 2.
	waitFor(t, s, "attempt 2 scheduled", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReconnecting && sn.Attempt == 2 })
	start := time.Now()
	_, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "x"})
	if el := time.Since(start); el >= p.ToolCallTimeout {
		t.Errorf("call to a down server took %v, its whole %v timeout", el, p.ToolCallTimeout)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "reconnecting (attempt 2 of 5)") {
		t.Errorf("err %q does not say the server is reconnecting (attempt 2 of 5)", err)
	}
	if got := toolNames(reg.Tools("ns")); !slices.Equal(got, published) {
		t.Errorf("during the outage the registry holds %v, want the last good tools %v", got, published)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	start = time.Now()
	if err := s.Dispose(dctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= 15*time.Second {
		t.Errorf("dispose with a pending 30s reconnect took %v: it waited for the reconnect", el)
	}
	if g := s.Snapshot().Generation; g != 1 {
		t.Errorf("generation %d after dispose", g)
	}
	if len(reg.Tools("ns")) != 0 {
		t.Errorf("dispose left tools registered")
	}
}

// A connection that never failed has nothing to clear when it becomes
// stable: no change signal, so an idle fleet costs no reconciles.
// See docs/design.md, "Backoff and the attempt budget".
func TestStdioStableFirstConnectionSignalsNoChange(t *testing.T) {
	p := stdioPolicy()
	p.Reconnect.MaxDelay = time.Second // the stability window
	g := NewWithT(t)
	fc := clocktesting.NewFakeClock(time.Now())
	s, _ := startSupervisor(t, p, func(o *Options) { o.Clock = fc })
	waitFor(t, s, "Ready", isReady)
	// The window is the only timer on the clock (no health checks, no
	// idle time): once it waits, serve runs, and everything connecting
	// signalled (the phase, the events) was sent before it.
	g.Eventually(fc.HasWaiters, eventually, time.Millisecond).Should(BeTrue())
	select {
	case <-s.Changes():
	default:
	}
	fc.Step(p.Reconnect.MaxDelay)
	g.Eventually(fc.HasWaiters, eventually, time.Millisecond).Should(BeFalse(), "the window ended")
	// The window's end is handled in serve's loop: a signal from it comes
	// at once, or not at all.
	select {
	case <-s.Changes():
		t.Fatalf("a change was signalled when the connection became stable: %+v", s.Snapshot())
	case <-time.After(time.Second):
	}
}
