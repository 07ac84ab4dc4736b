package bridge

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

// The supervisor's design targets (docs/design.md, "How it is tested")
// measured against the fixture as a real stdio child (docs/benchmarks.md,
// "Connection supervisor"), one sample per iteration:
//
//	go test -run '^$' -bench 'Supervisor(StartToReady|Recovery|Deadline|DisposeStalled)' -benchtime=50x ./internal/bridge/
//
// Benchmarks, not tests: a missed target is logged, never a failure.

const (
	// benchTools generated tools; the fixture adds benchBuiltinTools.
	benchTools        = 13
	benchBuiltinTools = 8
	// benchInitialDelay is the recovery's initialDelayMs; maxDelayMs is
	// twice that.
	benchInitialDelay = 100 * time.Millisecond
	// benchStallBudget is the deadline row's connectionTimeoutMs.
	benchStallBudget = 300 * time.Millisecond
)

func benchPolicy(args ...string) *policy.Policy {
	p := stdioPolicy(args...)
	p.Reconnect.InitialDelay, p.Reconnect.MaxAttempts = 100*time.Millisecond, 1000
	return p
}

func benchSupervisor(p *policy.Policy, log logr.Logger) *Supervisor {
	return New(Options{Namespace: "bench", Name: "fx", Policy: p, Registry: registry.New(), Log: log})
}

// benchToolsArg is the fixture's --tools flag for benchTools.
var benchToolsArg = "--tools=" + strconv.Itoa(benchTools)

// BenchmarkSupervisorStartToReady: Start → Ready (spawn, connect, the
// complete tools/list of 21 tools), and the Dispose of a Ready supervisor
// (the child exits on stdin EOF). No target: the floor of recovery.
func BenchmarkSupervisorStartToReady(b *testing.B) {
	var ready, disposed testenv.Latencies
	for b.Loop() {
		s := benchSupervisor(benchPolicy(benchToolsArg), logr.Discard())
		t0 := time.Now()
		s.Start(context.Background())
		sn, at := benchWait(b, s, "Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady })
		if len(sn.Tools) != benchTools+benchBuiltinTools {
			b.Fatalf("Ready with %d tools, want %d", len(sn.Tools), benchTools+benchBuiltinTools)
		}
		ready = append(ready, at.Sub(t0))
		disposed = append(disposed, benchDispose(b, s))
	}
	ready.Report(b, "ready", "ms")
	disposed.Report(b, "dispose", "ms")
	b.Logf("load average %s", testenv.LoadAvg())
}

// BenchmarkSupervisorRecovery: SIGKILL the child → the next generation
// Ready with the same tools. maxDelayMs (the stability window) is twice the
// initial delay and each kill waits until the connection has outlived it,
// so every kill opens a fresh outage and waits exactly initialDelayMs
// (docs/design.md, "Backoff and the attempt budget"). loss is the part
// until the retry is scheduled (loss handled, generation closed, child
// reaped), connect the part from the retry's due time to Ready.
func BenchmarkSupervisorRecovery(b *testing.B) {
	p := benchPolicy(benchToolsArg)
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: benchInitialDelay, MaxDelay: 2 * benchInitialDelay, MaxAttempts: 1000}
	s := benchSupervisor(p, logr.Discard())
	s.Start(context.Background())
	defer benchDispose(b, s)
	sn, readyAt := benchWait(b, s, "Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady })
	want := benchToolNames(sn)
	var total, loss, connect testenv.Latencies
	notFirst := 0
	for b.Loop() {
		time.Sleep(time.Until(readyAt.Add(p.Reconnect.MaxDelay + 50*time.Millisecond)))
		pid := benchPid(b, s)
		gen := s.Snapshot().Generation
		select { // a stale change signal would wake the wait below early
		case <-s.Changes():
		default:
		}
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		var retry Snapshot // the scheduled retry, if seen
		sn, at := benchWait(b, s, "the next generation Ready", func(sn Snapshot) bool {
			if !sn.NextRetry.IsZero() && retry.NextRetry.IsZero() {
				retry = sn
			}
			return sn.Phase == v1alpha1.PhaseReady && sn.Generation > gen
		})
		if got := benchToolNames(sn); !slices.Equal(got, want) {
			b.Fatalf("tools after recovery differ: %v", got)
		}
		readyAt = at
		total = append(total, at.Sub(killed))
		if !retry.NextRetry.IsZero() {
			if retry.Attempt != 1 || retry.RetryDelay != benchInitialDelay {
				notFirst++
			}
			loss = append(loss, retry.NextRetry.Add(-retry.RetryDelay).Sub(killed))
			connect = append(connect, at.Sub(retry.NextRetry))
		}
	}
	total.Report(b, "recovery", "ms")
	loss.Report(b, "loss", "ms")
	connect.Report(b, "connect", "ms")
	target := benchInitialDelay + 150*time.Millisecond
	testenv.Target(b, "recovery p50", total.Percentile(50), "p50 ≤ initialDelayMs + 150 ms = "+target.String(),
		total.Percentile(50) <= target)
	if notFirst > 0 || len(loss) < len(total) {
		b.Logf("%d of %d recoveries were not attempt 1 after %s; the retry was seen in %d", notFirst, len(total), benchInitialDelay, len(loss))
	}
	b.Logf("load average %s", testenv.LoadAvg())
}

// BenchmarkSupervisorDeadline: a server that never answers initialize,
// under a 300 ms connectionTimeoutMs with failOnStartupError: Start → the
// deadline in lastError (seen), → the supervisor logs the failed attempt
// (its own clock, no polling delay), → Failed/StartupFailed (generation
// closed, child reaped).
func BenchmarkSupervisorDeadline(b *testing.B) {
	var seen, logged, failed testenv.Latencies
	for b.Loop() {
		p := benchPolicy("--stall-initialize")
		p.ConnectionTimeout, p.FailOnStartupError = benchStallBudget, true
		lt := &benchLogTimer{msg: "connection attempt failed", at: make(chan time.Time, 1)}
		s := benchSupervisor(p, lt.logger())
		t0 := time.Now()
		s.Start(context.Background())
		sn, at := benchWait(b, s, "the deadline in lastError", func(sn Snapshot) bool { return sn.LastError != nil })
		if !IsDeadline(sn.LastError) {
			b.Fatalf("lastError is not the deadline: %v", sn.LastError)
		}
		seen = append(seen, at.Sub(t0))
		select {
		case l := <-lt.at:
			logged = append(logged, l.Sub(t0))
		default:
		}
		sn, at = benchWait(b, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
		if sn.Reason != v1alpha1.ReasonStartupFailed {
			b.Fatalf("failed with reason %q: %s", sn.Reason, sn.Message)
		}
		failed = append(failed, at.Sub(t0))
		benchDispose(b, s)
	}
	seen.Report(b, "lasterror", "ms")
	logged.Report(b, "logged", "ms")
	failed.Report(b, "failed", "ms")
	limit := benchStallBudget + 150*time.Millisecond
	target := "acted on within 150 ms of the " + benchStallBudget.String() + " budget, max ≤ " + limit.String()
	testenv.Target(b, "lastError max", slices.Max(seen), target, slices.Max(seen) <= limit)
	testenv.Target(b, "Failed max", slices.Max(failed), target, slices.Max(failed) <= limit)
	b.Logf("load average %s", testenv.LoadAvg())
}

// BenchmarkSupervisorDisposeStalled: Dispose while connect waits on a
// server that never answers initialize (60 s budget); stopped: the child is
// SIGSTOPped first, so that it does not even notice its stdin closing and
// the supervisor has to escalate to signals.
func BenchmarkSupervisorDisposeStalled(b *testing.B) {
	for _, stopped := range []bool{false, true} {
		b.Run(map[bool]string{false: "running", true: "stopped"}[stopped], func(b *testing.B) {
			var disposed testenv.Latencies
			for b.Loop() {
				p := benchPolicy("--stall-initialize")
				p.ConnectionTimeout = 60 * time.Second
				s := benchSupervisor(p, logr.Discard())
				s.Start(context.Background())
				pid := benchOnlyChild(b)
				if stopped {
					if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
						b.Fatal(err)
					}
				}
				time.Sleep(50 * time.Millisecond) // let initialize reach the stalled child
				if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseConnecting || sn.LastError != nil {
					b.Fatalf("not connecting: phase %s, lastError %v", sn.Phase, sn.LastError)
				}
				disposed = append(disposed, benchDispose(b, s))
				if stopped {
					_ = syscall.Kill(pid, syscall.SIGCONT) // should it have survived
				}
			}
			disposed.Report(b, "dispose", "ms")
			testenv.Target(b, "dispose max", slices.Max(disposed), "disposal during a hung connect ≤ 200ms",
				slices.Max(disposed) <= 200*time.Millisecond)
			b.Logf("load average %s", testenv.LoadAvg())
		})
	}
}

// benchWait returns the first snapshot for which cond holds, waking on
// every change signal and at least every millisecond, with the time it
// was seen.
func benchWait(b *testing.B, s *Supervisor, what string, cond func(Snapshot) bool) (Snapshot, time.Time) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		sn, now := s.Snapshot(), time.Now()
		if cond(sn) {
			return sn, now
		}
		if now.After(deadline) {
			b.Fatalf("no %s after 30s: phase %s reason %q generation %d lastError %v", what, sn.Phase, sn.Reason, sn.Generation, sn.LastError)
		}
		select {
		case <-s.Changes():
		case <-tick.C:
		}
	}
}

// benchDispose disposes s, times it, and fails when a child of this
// process outlives it.
func benchDispose(b *testing.B, s *Supervisor) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	err := s.Dispose(ctx)
	d := time.Since(t0)
	if err != nil {
		b.Fatalf("dispose: %v", err)
	}
	if left := proc.Children(os.Getpid()); len(left) > 0 {
		b.Fatalf("after a Dispose that took %s, children were still alive: %v", d, left)
	}
	return d
}

// benchOnlyChild waits until this process has exactly one child.
func benchOnlyChild(b *testing.B) int {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c := proc.Children(os.Getpid()); len(c) == 1 {
			return c[0].PID
		} else if time.Now().After(deadline) {
			b.Fatalf("expected one child process, have %v", c)
		}
		time.Sleep(time.Millisecond)
	}
}

// benchPid asks the fixture for its pid.
func benchPid(b *testing.B, s *Supervisor) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, "pid", nil)
	if err == nil {
		err = ResultError(res)
	}
	if err != nil {
		b.Fatalf("pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(RenderText(res)))
	if err != nil {
		b.Fatalf("pid tool answered %q", RenderText(res))
	}
	return pid
}

func benchToolNames(sn Snapshot) []string {
	out := make([]string, len(sn.Tools))
	for i, t := range sn.Tools {
		out[i] = t.Name
	}
	return out
}

// benchLogTimer remembers when a message containing msg was first logged:
// the supervisor's own clock for an event.
type benchLogTimer struct {
	msg string
	at  chan time.Time
}

func (lt *benchLogTimer) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		if strings.Contains(args, lt.msg) {
			select {
			case lt.at <- time.Now():
			default:
			}
		}
	}, funcr.Options{})
}
