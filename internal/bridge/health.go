package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// healthFailures in a row make a loss (§4.5).
const healthFailures = 2

// demandProbeTimeout bounds a probe triggered by a failed call when no
// health-check interval is configured.
const demandProbeTimeout = 5 * time.Second

// healthLoop probes the connection every healthCheckIntervalMs, each probe
// bounded by half the interval; two failures in a row are a loss. A probe
// requested by a failed call runs at once, and one failure of it is a loss.
func (s *Supervisor) healthLoop(g *generation) {
	interval := s.p.HealthCheckInterval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	failures := 0
	for {
		onDemand := false
		select {
		case <-g.ctx.Done():
			return
		case <-ticker.C:
		case <-g.probe:
			onDemand = true
		}
		err := probe(g, interval/2)
		switch {
		case err == nil:
			failures = 0
		case g.ctx.Err() != nil:
			return
		default:
			failures++
			if onDemand || failures >= healthFailures {
				g.markLost(&StageError{Stage: StageHealthCheck, Err: err})
				return
			}
		}
	}
}

// probeOnDemand serves probes requested by failed calls when the periodic
// health check is disabled.
func (s *Supervisor) probeOnDemand(g *generation) {
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.probe:
		}
		if err := probe(g, demandProbeTimeout); err != nil && g.ctx.Err() == nil {
			g.markLost(&StageError{Stage: StageHealthCheck, Err: err})
			return
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
	case g.sess.InitializeResult().ProtocolVersion < SessionlessProtocol:
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

// isSessionLost: the connection is certainly gone.
func isSessionLost(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// isTransportFailure: the request may not have reached the server, so the
// connection deserves a probe. A JSON-RPC error came from the server itself.
func isTransportFailure(err error) bool {
	if isServerAnswer(err) {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// codeRejected is the JSON-RPC code the SDK gives a request that the
// transport rejected (connection refused, 5xx): not an answer of the server.
const codeRejected = -32005

// isServerAnswer: the error is a JSON-RPC error the server itself sent.
func isServerAnswer(err error) bool {
	var wire *jsonrpc.Error
	return errors.As(err, &wire) && wire.Code != codeRejected
}
