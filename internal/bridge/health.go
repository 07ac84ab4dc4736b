package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/mcpbridge/operator/internal/registry"
)

// healthFailures in a row make a loss.
const healthFailures = 2

// demandProbeTimeout bounds a probe triggered by a failed call when no
// health-check interval is configured.
const demandProbeTimeout = 5 * time.Second

// healthChecks probes a live generation every healthCheckIntervalMs, each
// probe bounded by half the interval; two failures in a row are a loss. A
// probe requested by a failed call runs at once, and one failure of it is a
// loss. With the interval at 0 only requested probes run, each bounded by
// demandProbeTimeout. The periodic probes keep the interval's grid on the
// supervisor's clock, as a ticker would; a probe's own deadline runs on
// real time, like every request's.
//
// Between probes only a timer waits: a probe runs on a goroutine that ends
// with it, so that an idle connection keeps no goroutine for its health
// check (docs/design.md, "Replicas and ownership": memory). See
// docs/design.md, "Detecting loss".
type healthChecks struct {
	mu       sync.Mutex
	clock    clock.WithDelayedExecution
	interval time.Duration // 0: only requested probes
	timeout  time.Duration
	live     bool        // started and not stopped: probes may run
	running  bool        // the probing goroutine runs
	asked    bool        // a call asked for a probe; it runs next
	due      time.Time   // when the next periodic probe is due
	timer    clock.Timer // fires at due
	fired    bool        // the timer fired: the periodic probe is due
	failures int         // periodic probes failed in a row; only the probing goroutine uses it
}

// startHealth begins the health checks of a live generation; a probe a
// call asked for before runs at once.
func (g *generation) startHealth(c clock.WithDelayedExecution, interval time.Duration) {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.ctx.Err() != nil {
		return
	}
	h.clock, h.interval, h.timeout, h.live = c, interval, demandProbeTimeout, true
	if interval > 0 {
		h.timeout, h.due = interval/2, c.Now().Add(interval)
	}
	g.probeOrWaitLocked()
}

// askProbe runs a probe now, for a call that saw a transport failure; one
// asked for before the generation is live runs when it becomes live.
func (g *generation) askProbe() {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = true
	g.probeOrWaitLocked()
}

// stopHealth stops the timer; no probe starts any more. The generation
// calls it when it closes.
func (g *generation) stopHealth() {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = false
	if h.timer != nil {
		h.timer.Stop()
	}
}

// probeOrWaitLocked starts the probing goroutine when a probe is wanted
// now, or else sets the timer for the next periodic one.
func (g *generation) probeOrWaitLocked() {
	h := &g.health
	switch {
	case !h.live || h.running:
	case h.asked || h.dueLocked():
		g.startProbesLocked()
	case h.interval > 0:
		if h.timer != nil {
			h.timer.Stop()
		}
		h.timer = h.clock.AfterFunc(h.due.Sub(h.clock.Now()), g.probeDue)
		if h.dueLocked() {
			// The clock passed due while the timer was set (a fake
			// clock stepped between the two), so the timer is late: the
			// probe runs now, and its end sets the next timer.
			g.startProbesLocked()
		}
	}
}

func (h *healthChecks) dueLocked() bool {
	return h.interval > 0 && !h.clock.Now().Before(h.due)
}

// probeDue is the timer's: the periodic probe is due. It reads no clock: a
// fake clock runs it while it holds its own lock.
func (g *generation) probeDue() {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fired = true
	if h.live && !h.running {
		g.startProbesLocked()
	}
}

func (g *generation) startProbesLocked() {
	g.health.running = true
	g.goFn(g.probes)
}

// probes runs the wanted probes one after another, then sets the timer
// and returns; it returns at once after a loss or once the generation
// closes.
func (g *generation) probes() {
	h := &g.health
	for {
		asked, ok := g.nextProbe()
		if !ok {
			return
		}
		err := probe(g, h.timeout)
		switch {
		case err == nil:
			h.failures = 0
		case g.ctx.Err() != nil:
			return
		default:
			h.failures++
			if asked || h.failures >= healthFailures {
				g.lose(StageHealthCheck, err)
				return
			}
		}
	}
}

// nextProbe takes the probe wanted now, a requested one first; when none
// is, it sets the timer and reports false.
func (g *generation) nextProbe() (asked, ok bool) {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.live:
	case h.asked:
		h.asked = false
		return true, true
	case h.fired || h.dueLocked():
		h.fired = false
		for !h.due.After(h.clock.Now()) {
			h.due = h.due.Add(h.interval)
		}
		return false, true
	}
	h.running = false
	g.probeOrWaitLocked()
	return false, false
}

// probe sends a request valid for the negotiated protocol: ping up to
// 2025-11-25, the first tools/list page from 2026-07-28 on (which has no
// ping). Over HTTP both are posted by ourselves: the SDK would decode the
// ping's answer through a 32 KiB buffer and cache the list. Any JSON-RPC
// answer, an error included, proves the server alive.
func probe(g *generation, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	var err error
	hl, isHTTP := g.link.(*httpLink)
	pings := g.sess.InitializeResult().ProtocolVersion < registry.SessionlessProtocol
	switch {
	case pings && isHTTP:
		err = g.pingProbe(ctx, hl)
	case pings:
		err = g.sess.Ping(ctx, nil)
	case isHTTP:
		err = g.listProbe(ctx, hl)
	default:
		// The SDK may answer from its list cache while a server-given
		// ttlMs lasts; probes then reach the server once per TTL.
		_, err = g.sess.ListTools(ctx, nil)
	}
	if err == nil || (isServerAnswer(err) && !isSessionLost(err)) {
		return nil
	}
	if ctx.Err() != nil && g.ctx.Err() == nil {
		return fmt.Errorf("no answer to a health probe within %dms", timeout.Milliseconds())
	}
	return err
}
