package bridge

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
)

// TestCrashReconnectCyclesLeaveNoLeak kills the stdio child 200 times, each
// time waiting for the next generation to be Ready, then disposes the
// supervisor and checks that nothing of the 201 generations is left: no
// goroutine above the count before Start, no child process or zombie, no
// member of any of the children's process groups, no published tool.
func TestCrashReconnectCyclesLeaveNoLeak(t *testing.T) {
	const cycles = 200
	p := stdioPolicy("--tools=3")
	// The stability window is maxDelay (2 ms): a connection that
	// lives through a pid call and a kill usually outlasts it and resets the
	// budget. Should none, the delay is still capped at 2 ms and 1000
	// attempts outlast 200 losses, so the budget cannot run out either way.
	// See docs/design.md, "Backoff and the attempt budget".
	p.Reconnect = policy.Reconnect{Enabled: true, InitialDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxAttempts: 1000}

	// Children of this process that predate the supervisor (another test's,
	// still being reaped) are not this test's business.
	before := map[int]bool{}
	for _, pr := range cycleProcs(t) {
		if pr.ppid == os.Getpid() {
			before[pr.pid] = true
			t.Logf("child %d (%s) predates the supervisor: ignored", pr.pid, pr.comm)
		}
	}
	baseline := runtime.NumGoroutine()
	reg := registry.New()
	s := New(Options{Namespace: "ns", Name: "srv", Policy: p, Registry: reg, Log: logr.Discard(), CloseBarrier: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	disposed := false
	t.Cleanup(func() {
		if !disposed {
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer dcancel()
			_ = s.Dispose(dctx)
		}
	})
	s.Start(ctx)

	sn := waitFor(t, s, "Ready", isReady)
	want := toolNames(sn.Tools)
	var pids []int
	pidCall := func(cycle int) int {
		t.Helper()
		res, err := s.CallTool(ctx, "pid", nil)
		if err != nil {
			t.Fatalf("cycle %d: pid: %v (snapshot %+v)", cycle, err, s.Snapshot())
		}
		pid := pidOf(t, res)
		if slices.Contains(pids, pid) {
			t.Fatalf("cycle %d: pid %d seen before: the child was not replaced", cycle, pid)
		}
		pids = append(pids, pid)
		return pid
	}

	start := time.Now()
	maxFailed := 0
	for i := 1; i <= cycles; i++ {
		pid := pidCall(i)
		gen := sn.Generation
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("cycle %d: kill %d: %v", i, pid, err)
		}
		sn = waitFor(t, s, fmt.Sprintf("cycle %d: a generation after %d Ready", i, gen), func(sn Snapshot) bool {
			maxFailed = max(maxFailed, sn.FailedAttempts)
			return sn.Phase == v1alpha1.PhaseFailed || (sn.Phase == v1alpha1.PhaseReady && sn.Generation > gen)
		})
		if sn.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("cycle %d: supervisor stopped: %s: %s (lastError %v)", i, sn.Reason, sn.Message, sn.LastError)
		}
		if got := toolNames(sn.Tools); !slices.Equal(got, want) {
			t.Fatalf("cycle %d: tools changed across reconnect: %v -> %v", i, want, got)
		}
	}
	elapsed := time.Since(start)
	pidCall(cycles + 1) // the live generation's child
	t.Logf("%d kill→reconnect cycles in %s (%s per cycle); generation %d; at most %d consecutive failed attempts seen",
		cycles, elapsed.Round(time.Millisecond), (elapsed / cycles).Round(10*time.Microsecond), sn.Generation, maxFailed)
	if sn.Generation != cycles+1 {
		t.Errorf("generation %d after %d cycles, want %d: some reconnect attempts failed", sn.Generation, cycles, cycles+1)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	t0 := time.Now()
	if err := s.Dispose(dctx); err != nil {
		t.Fatalf("dispose: %v", err)
	}
	disposed = true
	t.Logf("dispose took %s", time.Since(t0).Round(10*time.Microsecond))
	if tools := reg.Tools("ns"); len(tools) != 0 {
		t.Errorf("%d tools still published after dispose", len(tools))
	}

	// Processes: Dispose returned, so every generation has been reaped.
	// Nothing may be a child of this process (the fixture binary was built
	// in TestMain, before this test) that was not one before Start, zombie
	// or not, nor be in the process group of any child seen.
	groups := map[int]bool{}
	for _, pid := range pids {
		groups[pid] = true // each child leads its own group
	}
	for _, pr := range cycleProcs(t) {
		switch {
		case before[pr.pid]:
		case pr.ppid == os.Getpid() && pr.state == "Z":
			t.Errorf("zombie child %d (%s) left behind", pr.pid, pr.comm)
		case pr.ppid == os.Getpid():
			t.Errorf("child %d (%s, state %s) left behind", pr.pid, pr.comm, pr.state)
		case groups[pr.pgrp]:
			t.Errorf("process %d (%s, state %s) left in the process group of child %d", pr.pid, pr.comm, pr.state, pr.pgrp)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
			t.Errorf("process group %d: kill 0 = %v, want ESRCH", pid, err)
		}
	}

	// Goroutines: back to the count before Start.
	NewWithT(t).Eventually(runtime.NumGoroutine, 5*time.Second, 10*time.Millisecond).Should(BeNumerically("<=", baseline), func() string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return fmt.Sprintf("goroutines 5s after dispose, %d before start:\n%s", baseline, buf)
	})
}

type cycleProc struct {
	pid, ppid, pgrp int
	state, comm     string
}

// cycleProcs lists every process visible in /proc with its parent, process
// group and state.
func cycleProcs(t *testing.T) []cycleProc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var out []cycleProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := proc.ReadStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, cycleProc{pid: pid, ppid: st.PPID, pgrp: st.Pgrp, state: string(st.State), comm: st.Comm})
	}
	return out
}
