// Command supervisor measures the connection supervisor (internal/bridge)
// against the real stdio fixture server, run as a child process, and prints
// a markdown table with the command that reproduces it.
//
//	go run ./hack/bench/supervisor [-kills=50] [-initial-delay=100ms] [-fixture=PATH]
//
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
// See docs/design.md, "How it is tested".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
)

const fixturePkg = "github.com/mcpbridge/operator/test/fixture/cmd/mcp-fixture"

// builtinTools is how many tools the fixture lists besides --tools.
const builtinTools = 8

var (
	flagKills        = flag.Int("kills", 50, "a: SIGKILL → recovery cycles")
	flagFixture      = flag.String("fixture", "", "fixture binary (default: go build "+fixturePkg+" into a temp dir)")
	flagInitialDelay = flag.Duration("initial-delay", 100*time.Millisecond, "a: reconnect.initialDelayMs (maxDelayMs is twice this)")
	flagTools        = flag.Int("tools", 13, "fixture --tools (generated tools; the fixture adds 8 built-ins: 13 → 21 tools)")
	flagStallReps    = flag.Int("stall-reps", 20, "b and c: repetitions")
	flagStallBudget  = flag.Duration("stall-budget", 300*time.Millisecond, "b: connectionTimeoutMs")
	flagStarts       = flag.Int("starts", 50, "d: Start → Ready repetitions")
	flagHungReps     = flag.Int("hung-reps", 5, "c2: Dispose during a connect to a SIGSTOPped child, repetitions (0 skips)")
	flagVerbose      = flag.Bool("v", false, "log the supervisors to stderr")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// row is one line of the result table.
type row struct {
	name    string
	samples []time.Duration
	goal    string
	met     string // "yes", "no", or "" when there is no goal
}

type bench struct {
	fixture string
	log     logr.Logger
	rows    []row
	notes   []string
	leaks   int // child processes found alive after a Dispose
}

func run() error {
	b := &bench{log: logr.Discard()}
	if *flagVerbose {
		b.log = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	}
	b.fixture = *flagFixture
	if b.fixture == "" {
		dir, err := os.MkdirTemp("", "bench-supervisor-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b.fixture = filepath.Join(dir, "mcp-fixture")
		build := exec.Command("go", "build", "-o", b.fixture, fixturePkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the fixture: %w", err)
		}
	}
	started, loadBefore := time.Now(), report.LoadAvg()
	fmt.Fprintln(os.Stderr, "d: Start → Ready ...")
	if err := b.startToReady(); err != nil {
		return fmt.Errorf("d: %w", err)
	}
	fmt.Fprintln(os.Stderr, "a: recovery after SIGKILL ...")
	if err := b.recovery(); err != nil {
		return fmt.Errorf("a: %w", err)
	}
	fmt.Fprintln(os.Stderr, "b: stalled initialize under a budget ...")
	if err := b.stalledInitialize(); err != nil {
		return fmt.Errorf("b: %w", err)
	}
	fmt.Fprintln(os.Stderr, "c: Dispose during a stalled connect ...")
	if err := b.disposeStalled(false); err != nil {
		return fmt.Errorf("c: %w", err)
	}
	if *flagHungReps > 0 {
		fmt.Fprintln(os.Stderr, "c2: Dispose during a connect to a stopped child ...")
		if err := b.disposeStalled(true); err != nil {
			return fmt.Errorf("c2: %w", err)
		}
	}
	if left := childPids(); len(left) > 0 {
		b.notes = append(b.notes, fmt.Sprintf("child processes still alive at the end: %v", left))
	}
	b.print(time.Since(started), loadBefore)
	return nil
}

// ---- the fixture and supervisors -------------------------------------------

func (b *bench) policy(args ...string) *policy.Policy {
	return &policy.Policy{
		ServerName:        "fx",
		Transport:         v1alpha1.TransportStdio,
		Stdio:             &policy.Stdio{Command: b.fixture, Args: args},
		ToolCallTimeout:   10 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		Reconnect:         policy.Reconnect{Enabled: true, InitialDelay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 1000},
	}
}

func (b *bench) toolsArg() string { return "--tools=" + strconv.Itoa(*flagTools) }

func (b *bench) wantTools() int { return *flagTools + builtinTools }

func (b *bench) newSupervisor(p *policy.Policy) *bridge.Supervisor {
	return b.newSupervisorLog(p, b.log)
}

func (b *bench) newSupervisorLog(p *policy.Policy, log logr.Logger) *bridge.Supervisor {
	return bridge.New(bridge.Options{Namespace: "bench", Name: "fx", Policy: p, Registry: registry.New(), Log: log})
}

// logTimer is a logger that remembers when a message containing msg was
// first logged: the supervisor's own clock for an event, free of the
// observer's polling and scheduling delay.
type logTimer struct {
	msg string
	at  chan time.Time
}

func newLogTimer(msg string) *logTimer {
	return &logTimer{msg: msg, at: make(chan time.Time, 1)}
}

func (lt *logTimer) logger(next logr.Logger) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if strings.Contains(args, lt.msg) {
			select {
			case lt.at <- time.Now():
			default:
			}
		}
		if next.Enabled() {
			next.Info(prefix + " " + args)
		}
	}, funcr.Options{})
}

// when is the time the message was logged, or zero.
func (lt *logTimer) when() time.Time {
	select {
	case t := <-lt.at:
		return t
	default:
		return time.Time{}
	}
}

// dispose disposes s and records any child left behind.
func (b *bench) dispose(s *bridge.Supervisor) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	err := s.Dispose(ctx)
	d := time.Since(t0)
	if left := childPids(); len(left) > 0 {
		b.leaks += len(left)
		b.notes = append(b.notes, fmt.Sprintf("after a Dispose that took %s, child processes were still alive: %v", ms(d), left))
	}
	return d, err
}

// waitSnap returns the first snapshot for which cond holds, waking on every
// change signal (and at least every millisecond), with the time it was seen.
func waitSnap(s *bridge.Supervisor, limit time.Duration, what string, cond func(bridge.Snapshot) bool) (bridge.Snapshot, time.Time, error) {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		sn := s.Snapshot()
		now := time.Now()
		if cond(sn) {
			return sn, now, nil
		}
		if now.After(deadline) {
			return sn, now, fmt.Errorf("timed out after %s waiting for %s; last snapshot: phase %s reason %q gen %d lastError %v",
				limit, what, sn.Phase, sn.Reason, sn.Generation, sn.LastError)
		}
		select {
		case <-s.Changes():
		case <-tick.C:
		}
	}
}

func pidOf(s *bridge.Supervisor) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, "pid", nil)
	if err != nil {
		return 0, err
	}
	if err := bridge.ResultError(res); err != nil {
		return 0, err
	}
	text := strings.TrimSpace(bridge.RenderText(res))
	if pid, err := strconv.Atoi(text); err == nil {
		return pid, nil
	}
	if m, ok := res.StructuredContent.(map[string]any); ok {
		if f, ok := m["pid"].(float64); ok {
			return int(f), nil
		}
	}
	return 0, fmt.Errorf("pid tool answered %q", text)
}

// childPids lists this process's children.
func childPids() []int {
	var out []int
	for _, c := range proc.Children(os.Getpid()) {
		out = append(out, c.PID)
	}
	return out
}

// waitChild waits until this process has exactly one child and returns it.
func waitChild(limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		if c := childPids(); len(c) == 1 {
			return c[0], nil
		} else if time.Now().After(deadline) {
			return 0, fmt.Errorf("expected one child process, have %v", c)
		}
		time.Sleep(time.Millisecond)
	}
}

// ---- the measurements ------------------------------------------------------

// d. Start → Ready (spawn + connect + the complete tools/list), and the
// Dispose of a Ready supervisor.
func (b *bench) startToReady() error {
	var ready, disp []time.Duration
	for i := 0; i < *flagStarts; i++ {
		s := b.newSupervisor(b.policy(b.toolsArg()))
		t0 := time.Now()
		s.Start(context.Background())
		sn, at, err := waitSnap(s, 30*time.Second, "Ready", func(sn bridge.Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady })
		if err != nil {
			_, _ = b.dispose(s)
			return err
		}
		if len(sn.Tools) != b.wantTools() {
			return fmt.Errorf("Ready with %d tools, want %d", len(sn.Tools), b.wantTools())
		}
		ready = append(ready, at.Sub(t0))
		d, err := b.dispose(s)
		if err != nil {
			return err
		}
		disp = append(disp, d)
	}
	b.rows = append(b.rows,
		row{name: fmt.Sprintf("d. Start → Ready: spawn + connect + list %d tools", b.wantTools()), samples: ready,
			goal: "(floor: p50 12 ms, p99 15 ms)"},
		row{name: "d2. Dispose of a Ready supervisor (child exits on stdin EOF)", samples: disp},
	)
	return nil
}

// a. SIGKILL the child, time until the next generation is Ready with its
// tools published. maxDelay (the stability window) is twice the
// initial delay and each kill waits until the connection has been up longer
// than that, so every kill opens a fresh outage and waits exactly
// initialDelay (attempt 1) before reconnecting.
// See docs/design.md, "Backoff and the attempt budget".
func (b *bench) recovery() error {
	initial := *flagInitialDelay
	p := b.policy(b.toolsArg())
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: initial, MaxDelay: 2 * initial, MaxAttempts: 1000}
	s := b.newSupervisor(p)
	s.Start(context.Background())
	defer func() { _, _ = b.dispose(s) }()
	sn, readyAt, err := waitSnap(s, 30*time.Second, "Ready", func(sn bridge.Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady })
	if err != nil {
		return err
	}
	want := toolNames(sn.Tools)
	if len(want) != b.wantTools() {
		return fmt.Errorf("Ready with %d tools, want %d", len(want), b.wantTools())
	}
	var total, detect, connect []time.Duration
	var oddAttempts, extraGens int
	stable := p.Reconnect.MaxDelay + 50*time.Millisecond
	prevPid := 0
	for i := 0; i < *flagKills; i++ {
		time.Sleep(time.Until(readyAt.Add(stable)))
		pid, err := pidOf(s)
		if err != nil {
			return fmt.Errorf("kill %d: pid: %w", i+1, err)
		}
		if pid == prevPid {
			return fmt.Errorf("kill %d: the pid %d did not change across a reconnect", i+1, pid)
		}
		prevPid = pid
		gen := s.Snapshot().Generation
		// Drain a stale change signal so that the wait below sees fresh ones.
		select {
		case <-s.Changes():
		default:
		}
		killAt := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		var retry bridge.Snapshot // the scheduled retry, if seen
		sn, at, err := waitSnap(s, 30*time.Second, "the next generation Ready", func(sn bridge.Snapshot) bool {
			if !sn.NextRetry.IsZero() && retry.NextRetry.IsZero() {
				retry = sn
			}
			return sn.Phase == v1alpha1.PhaseReady && sn.Generation > gen
		})
		if err != nil {
			return fmt.Errorf("kill %d: %w", i+1, err)
		}
		if got := toolNames(sn.Tools); !slices.Equal(got, want) {
			return fmt.Errorf("kill %d: tools after recovery differ: %v", i+1, got)
		}
		readyAt = at
		total = append(total, at.Sub(killAt))
		extraGens += int(sn.Generation - gen - 1)
		if !retry.NextRetry.IsZero() {
			if retry.Attempt != 1 || retry.RetryDelay != initial {
				oddAttempts++
			}
			scheduled := retry.NextRetry.Add(-retry.RetryDelay)
			detect = append(detect, scheduled.Sub(killAt))
			connect = append(connect, at.Sub(retry.NextRetry))
		}
	}
	goal := initial + 150*time.Millisecond
	b.rows = append(b.rows,
		row{name: fmt.Sprintf("a. Recovery: SIGKILL → next generation Ready, %d tools published (initialDelay %s)", len(want), ms(initial)),
			samples: total, goal: "p50 ≤ " + ms(goal), met: p50Within(total, goal)},
		row{name: "a1. of which SIGKILL → loss handled, generation closed, retry scheduled", samples: detect},
		row{name: fmt.Sprintf("a2. of which retry due (a1 + the %s attempt-1 delay) → Ready: timer lateness + spawn + connect + list", ms(initial)), samples: connect},
	)
	if oddAttempts > 0 {
		b.notes = append(b.notes, fmt.Sprintf("a: %d of %d recoveries were not attempt 1 with delay %s", oddAttempts, len(total), ms(initial)))
	}
	if extraGens > 0 {
		b.notes = append(b.notes, fmt.Sprintf("a: %d reconnect attempts failed along the way", extraGens))
	}
	if len(detect) < len(total) {
		b.notes = append(b.notes, fmt.Sprintf("a: the scheduled retry was observed in %d of %d recoveries (a1/a2 cover those)", len(detect), len(total)))
	}
	return nil
}

// b. A server that never answers initialize, under a short budget, with
// failOnStartupError: time until the deadline is reported, and until the
// supervisor has closed the generation and stopped.
func (b *bench) stalledInitialize() error {
	budget := *flagStallBudget
	var logged, seen, failed []time.Duration
	for i := 0; i < *flagStallReps; i++ {
		p := b.policy("--stall-initialize")
		p.ConnectionTimeout, p.FailOnStartupError = budget, true
		lt := newLogTimer("connection attempt failed")
		s := b.newSupervisorLog(p, lt.logger(b.log))
		t0 := time.Now()
		s.Start(context.Background())
		sn, at, err := waitSnap(s, 30*time.Second, "the deadline in LastError", func(sn bridge.Snapshot) bool {
			return sn.LastError != nil
		})
		if err == nil && !bridge.IsDeadline(sn.LastError) {
			err = fmt.Errorf("LastError is not the deadline: %v", sn.LastError)
		}
		if err == nil {
			seen = append(seen, at.Sub(t0))
			if l := lt.when(); !l.IsZero() {
				logged = append(logged, l.Sub(t0))
			}
			sn, at, err = waitSnap(s, 30*time.Second, "Failed/StartupFailed", func(sn bridge.Snapshot) bool {
				return sn.Phase == v1alpha1.PhaseFailed
			})
		}
		if err == nil && sn.Reason != v1alpha1.ReasonStartupFailed {
			err = fmt.Errorf("failed with reason %q: %s", sn.Reason, sn.Message)
		}
		if i == 0 && err == nil {
			b.notes = append(b.notes, fmt.Sprintf("b: lastError reads %q", sn.LastError.Error()))
		}
		if _, derr := b.dispose(s); err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
		failed = append(failed, at.Sub(t0))
	}
	lo, hi := budget, budget+150*time.Millisecond
	in := func(xs []time.Duration) string {
		if len(xs) == 0 {
			return ""
		}
		return report.YesNo(slices.Min(xs) >= lo && slices.Max(xs) <= hi)
	}
	b.rows = append(b.rows,
		row{name: fmt.Sprintf("b. Stalled initialize, connectionTimeoutMs %d: Start → lastError (deadline) in Snapshot", budget.Milliseconds()),
			samples: seen, goal: fmt.Sprintf("all in %s–%s", ms(lo), ms(hi)), met: in(seen)},
		row{name: "b1. Start → the supervisor logs the failed attempt (its own clock, no polling delay)", samples: logged},
		row{name: "b2. Start → Failed/StartupFailed (generation closed, child reaped)", samples: failed,
			goal: fmt.Sprintf("all in %s–%s", ms(lo), ms(hi)), met: in(failed)},
	)
	return nil
}

// c. Dispose while connect waits on a server that never answers initialize
// (60 s budget). With stopped, the child is also SIGSTOPped, so that it does
// not even notice its stdin closing: the supervisor has to escalate to
// signals.
func (b *bench) disposeStalled(stopped bool) error {
	reps := *flagStallReps
	if stopped {
		reps = *flagHungReps
	}
	var disp []time.Duration
	for i := 0; i < reps; i++ {
		p := b.policy("--stall-initialize")
		p.ConnectionTimeout = 60 * time.Second
		s := b.newSupervisor(p)
		s.Start(context.Background())
		pid, err := waitChild(10 * time.Second)
		if err != nil {
			_, _ = b.dispose(s)
			return err
		}
		if stopped {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return err
			}
		}
		// Let the client's first request reach the (stalled) child.
		time.Sleep(50 * time.Millisecond)
		if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseConnecting || sn.LastError != nil {
			return fmt.Errorf("not connecting: phase %s, lastError %v", sn.Phase, sn.LastError)
		}
		d, err := b.dispose(s)
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT) // should it have survived
		}
		if err != nil {
			return err
		}
		disp = append(disp, d)
	}
	if stopped {
		b.rows = append(b.rows, row{name: "c2. Dispose during a connect to a SIGSTOPped child (hung: ignores stdin EOF)", samples: disp,
			goal: "≤ close barrier 5 s", met: maxWithin(disp, bridge.DefaultCloseBarrier)})
		return nil
	}
	b.rows = append(b.rows, row{name: "c. Dispose during a stalled connect (connectionTimeoutMs 60000)", samples: disp,
		goal: "≤ 200 ms", met: maxWithin(disp, 200*time.Millisecond)})
	return nil
}

// ---- output ----------------------------------------------------------------

func (b *bench) print(elapsed time.Duration, loadBefore string) {
	cmd := "go run ./hack/bench/supervisor"
	flag.Visit(func(f *flag.Flag) { cmd += " -" + f.Name + "=" + f.Value.String() })
	fmt.Printf("Command: `%s`  \n", cmd)
	fmt.Printf("Date: %s; %d cores (runtime.NumCPU); %s %s/%s; fixture: stdio child, `%s` (%d tools); run took %s; 1-min load average %s before, %s after.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		b.toolsArg(), b.wantTools(), elapsed.Round(time.Second), loadBefore, report.LoadAvg())
	fmt.Println("| Measurement | n | p50 | p90 | p99 | min | max | Goal | Met |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|---|---|")
	for _, r := range b.rows {
		if len(r.samples) == 0 {
			fmt.Printf("| %s | | | | | | | %s | %s |\n", r.name, r.goal, r.met)
			continue
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.name, len(r.samples),
			ms(report.Percentile(r.samples, 50)), ms(report.Percentile(r.samples, 90)), ms(report.Percentile(r.samples, 99)),
			ms(slices.Min(r.samples)), ms(slices.Max(r.samples)), r.goal, r.met)
	}
	fmt.Println()
	fmt.Println("Percentiles are nearest-rank: with n ≤ 100, p99 is the largest sample.")
	fmt.Printf("Child processes alive after a Dispose: %d.\n", b.leaks)
	for _, n := range b.notes {
		fmt.Println("- " + n)
	}
}

func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
}

// p50Within says whether the median is at most limit.
func p50Within(xs []time.Duration, limit time.Duration) string {
	if len(xs) == 0 {
		return ""
	}
	return report.YesNo(report.Percentile(xs, 50) <= limit)
}

// maxWithin says whether every sample is at most limit.
func maxWithin(xs []time.Duration, limit time.Duration) string {
	if len(xs) == 0 {
		return ""
	}
	return report.YesNo(slices.Max(xs) <= limit)
}

func toolNames(tools []registry.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	return out
}
