package bridge

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// Between health probes an idle connection keeps no goroutine for them: a
// probe runs on a goroutine that ends with it (docs/design.md, "Replicas
// and ownership": memory). The probes still come, one per interval.
func TestAnIdleConnectionKeepsNoGoroutineForItsHealthChecks(t *testing.T) {
	g := NewWithT(t)
	const interval = time.Second
	fc := clocktesting.NewFakeClock(time.Now())
	fs := startHealthChecked(t, interval, fc)

	// The supervisor's loop and the wait for the session's end: the whole
	// idle set of a connection whose link reports no exit.
	idle := []string{"(*Supervisor).run", "(*generation).waitSession"}
	g.Eventually(bridgeGoroutines, eventually).Should(Equal(idle))
	probes := fs.listRequests.Load // on 2026-07-28 a probe is a tools/list
	for i := range 3 {
		base := probes()
		fc.Step(interval)
		g.Eventually(probes, eventually).Should(BeNumerically(">", base), "probe %d", i+1)
		g.Eventually(bridgeGoroutines, eventually).Should(Equal(idle), "after probe %d", i+1)
	}
}

// A periodic probe is not lost when the clock passes its due time while
// its timer is being set: the timer is then late by that step.
func TestAProbeDueWhileItsTimerIsSetRunsAtOnce(t *testing.T) {
	g := NewWithT(t)
	const interval = time.Second
	sc := &stepWhileSetting{FakeClock: clocktesting.NewFakeClock(time.Now()), step: interval}
	fs := startHealthChecked(t, interval, sc)
	probes := fs.listRequests.Load // on 2026-07-28 a probe is a tools/list
	base := probes()
	sc.armed.Store(true) // the timer set after the next probe is set late
	sc.Step(interval)
	g.Eventually(probes, eventually).Should(BeNumerically(">=", base+2),
		"the probe due while its timer was set (the clock is at its due time)")
}

// startHealthChecked starts a supervisor of a fake stdio server, probed
// every interval on clk, and waits until it is Ready.
func startHealthChecked(t *testing.T, interval time.Duration, clk clock.WithDelayedExecution) *stdioFakeServer {
	t.Helper()
	fs := stdioNewFakeServer(t, "alpha")
	d := &stdioFakeDialer{srv: fs.srv}
	p := stdioPolicy()
	p.HealthCheckInterval = interval
	s, _ := startSupervisor(t, p, stdioWithDialer(d), func(o *Options) { o.Clock = clk })
	t.Cleanup(d.release)
	waitFor(t, s, "Ready", isReady)
	return fs
}

// stepWhileSetting is a fake clock that, once armed, steps itself by step
// inside the next AfterFunc, between the caller's reading of the time and
// the timer's start.
type stepWhileSetting struct {
	*clocktesting.FakeClock
	step  time.Duration
	armed atomic.Bool
}

func (c *stepWhileSetting) AfterFunc(d time.Duration, f func()) clock.Timer {
	if c.armed.CompareAndSwap(true, false) {
		c.FakeClock.Step(c.step)
	}
	return c.FakeClock.AfterFunc(d, f)
}

// bridgeFrame is a function of this package (not of its tests) in a stack
// trace.
var bridgeFrame = regexp.MustCompile(`^github\.com/mcpbridge/operator/internal/bridge\.(\S+?)(?:\.func\d+)*\(`)

// bridgeGoroutines names the goroutines that run this package's code, by
// the outermost function of the package on each stack, sorted; goroutines
// of the tests' own helpers are left out.
func bridgeGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var names []string
	for _, stack := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(stack, "\n")
		outer := ""
		for i := 1; i+1 < len(lines); i += 2 {
			m := bridgeFrame.FindStringSubmatch(lines[i])
			if m == nil || strings.Contains(lines[i+1], "_test.go:") {
				continue
			}
			if m[1] != "(*generation).goLocked" { // the spawner, not the work
				outer = m[1]
			}
		}
		if outer != "" {
			names = append(names, outer)
		}
	}
	slices.Sort(names)
	return names
}

// A health probe up to 2025-11-25 is a ping we post ourselves over HTTP:
// the SDK's Ping decodes each answer through a buffer of 32 KiB, garbage
// from every server at every interval (docs/design.md, "Detecting loss").
func TestAPingOverHTTPAllocatesLittle(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	var pings atomic.Int64
	// Answered here, so that the test server's own decoding stays out of
	// the count.
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "ping" {
			return false
		}
		pings.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", r.RPCID)
		return true
	})
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "Ready", isReady)
	if sn.ServerInfo.ProtocolVersion != httpStatefulVersion {
		t.Fatalf("protocol %s, want %s", sn.ServerInfo.ProtocolVersion, httpStatefulVersion)
	}
	// The SDK opens the GET stream on its own after the handshake; its
	// allocations are not the probes'.
	NewWithT(t).Eventually(up.requests, eventually).Should(ContainElement(HaveField("Method", http.MethodGet)), "a GET stream")
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	// The process's allocations, the test server's included, against the
	// SDK's Ping to the same server: about 11 KB a probe against 76 KB
	// (31 against 86 KB under -race). Other tests' leftovers allocate in
	// the same process now and then, so the least of several batches
	// counts.
	perProbe := func(ping func() error) uint64 {
		const batches, n = 5, 20
		least := uint64(math.MaxUint64)
		for range batches {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				if err := ping(); err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			least = min(least, (after.TotalAlloc-before.TotalAlloc)/n)
		}
		return least
	}
	ours := perProbe(func() error { return probe(g, 5*time.Second) })
	sdk := perProbe(func() error { return g.sess.Ping(httpCtx(t), nil) })
	if want := int64(2 * 5 * 20); pings.Load() != want {
		t.Fatalf("%d pings reached the server, want %d", pings.Load(), want)
	}
	t.Logf("bytes allocated a probe: %d, through the SDK's Ping %d", ours, sdk)
	if ours+32<<10 > sdk {
		t.Errorf("a probe allocated %d bytes, the SDK's Ping %d: want at least its 32 KiB buffer less", ours, sdk)
	}
}

// A Streamable HTTP session with a GET stream (2025-11-25) keeps no
// goroutine waiting for its end: waitSession starts when the SDK ends the
// connection's context. The end is still seen at once, with no health
// check to find it; a sessionless one (2026-07-28, no GET stream) waits
// from the connect on. See docs/design.md, "Detecting loss".
func TestAnHTTPSessionsEndIsSeenWithoutAGoroutineWaitingForIt(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		g := NewWithT(t)
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		p := httpPolicy(up.URL())
		p.HealthCheckInterval = 0
		s, _ := startSupervisor(t, p)
		waitFor(t, s, "Ready", isReady)
		g.Eventually(bridgeGoroutines, eventually).Should(ContainElement("(*Supervisor).run"))
		if stateless {
			g.Expect(bridgeGoroutines()).To(ContainElement("(*generation).waitSession"))
			return // its end is seen by waitSession, as for stdio
		}
		g.Expect(bridgeGoroutines()).NotTo(ContainElement("(*generation).waitSession"), "started before Ready, if at all")

		up.srv.CloseClientConnections()
		up.srv.Close() // the GET stream ends and cannot be opened again
		sn := waitFor(t, s, "the session's end", func(sn Snapshot) bool { return sn.Phase != v1alpha1.PhaseReady })
		g.Expect(sn.LastError).To(HaveOccurred())
	})
}
