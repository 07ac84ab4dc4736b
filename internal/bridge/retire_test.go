package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// A supervisor retired for a handoff answers the call it has in flight and
// refuses every new one, on both call paths, with registry.ErrNotServing:
// the one error a route may send on to the new holder, since the call was
// not made.
func TestARetiredSupervisorRefusesNewCallsAndAnswersThoseInFlight(t *testing.T) {
	forEachTransport(t, func(t *testing.T, p *policy.Policy) {
		g := NewWithT(t)
		s, _ := startSupervisor(t, p)
		waitFor(t, s, "Ready", isReady)
		inFlight := make(chan error, 1)
		go func() {
			res, err := s.CallTool(t.Context(), fixture.ToolSleep, map[string]any{"ms": 300})
			if err == nil && res.IsError {
				err = errors.New(RenderText(res))
			}
			inFlight <- err
		}()
		g.Eventually(s.InFlight).Should(Equal(1))

		s.Retire()
		_, err := s.CallTool(t.Context(), fixture.ToolEcho, map[string]any{"text": "x"})
		g.Expect(err).To(MatchError(registry.ErrNotServing), "the SDK path")
		_, _, err = s.CallToolJSON(t.Context(), fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
		g.Expect(err).To(MatchError(registry.ErrNotServing), "the JSON path")
		g.Expect(<-inFlight).To(Succeed(), "the call in flight when it was retired")
		g.Expect(s.InFlight()).To(Equal(0))
	})
}

// A call waiting for a sleeping server's wake when the supervisor is
// retired and stopped was never made: it is refused as not served here, so
// that its route sends it to the new holder, not failed as unavailable. The
// server's second start never answers its handshake, so the call is still
// waiting when the stop ends the wake.
func TestACallWaitingForAWakeWhenRetiredIsRefusedAsNotServedHere(t *testing.T) {
	g := NewWithT(t)
	started := filepath.Join(t.TempDir(), "started")
	p := stdioPolicy()
	p.Stdio = &policy.Stdio{Command: "/bin/sh", Args: []string{"-c",
		`if [ -e "$1" ]; then exec sleep 3600; fi; : > "$1"; exec "$0"`, fixtureBin, started}}
	p.SuspendAfter, p.HealthCheckInterval = suspendAfter, 0
	fc := clocktesting.NewFakeClock(time.Now())
	s, _ := startSupervisor(t, p, func(o *Options) { o.TerminateGrace = 200 * time.Millisecond; o.Clock = fc })
	waitFor(t, s, "Ready", isReady)
	waitTimers(t, fc)
	fc.Step(suspendAfter)
	waitFor(t, s, "Idle", isIdle)

	waiting := make(chan error, 1)
	go func() {
		_, err := echo(t.Context(), s, "wake")
		waiting <- err
	}()
	g.Eventually(s.Sleeping).Should(BeFalse(), "the call asked for the wake")
	s.Retire()
	dctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g.Expect(s.Dispose(dctx)).To(Succeed())
	g.Eventually(waiting).Should(Receive(MatchError(registry.ErrNotServing)))
}
