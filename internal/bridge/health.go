package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpbridge/operator/internal/registry"
)

// healthFailures in a row make a loss.
const healthFailures = 2

// demandProbeTimeout bounds a probe triggered by a failed call when no
// health-check interval is configured.
const demandProbeTimeout = 5 * time.Second

// healthLoop probes the connection every healthCheckIntervalMs, each probe
// bounded by half the interval; two failures in a row are a loss. A probe
// requested by a failed call runs at once, and one failure of it is a loss.
// With the interval at 0 only requested probes run, each bounded by
// demandProbeTimeout. The interval runs on the supervisor's clock; a
// probe's own deadline on real time, like every request's.
// See docs/design.md, "Detecting loss".
func (s *Supervisor) healthLoop(g *generation) {
	interval := s.p.HealthCheckInterval
	var tick <-chan time.Time
	timeout := demandProbeTimeout
	if interval > 0 {
		ticker := s.clock.NewTicker(interval)
		defer ticker.Stop()
		tick, timeout = ticker.C(), interval/2
	}
	failures := 0
	for {
		onDemand := false
		select {
		case <-g.ctx.Done():
			return
		case <-tick:
		case <-g.probe:
			onDemand = true
		}
		err := probe(g, timeout)
		switch {
		case err == nil:
			failures = 0
		case g.ctx.Err() != nil:
			return
		default:
			failures++
			if onDemand || failures >= healthFailures {
				g.lose(StageHealthCheck, err)
				return
			}
		}
	}
}

// probe sends a request valid for the negotiated protocol: ping up to
// 2025-11-25, the first tools/list page from 2026-07-28 on (which has no
// ping), posted by ourselves over HTTP so that the SDK does not cache it.
// Any JSON-RPC answer, an error included, proves the server alive.
func probe(g *generation, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	var err error
	hl, isHTTP := g.link.(*httpLink)
	switch {
	case g.sess.InitializeResult().ProtocolVersion < registry.SessionlessProtocol:
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
