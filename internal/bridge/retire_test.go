package bridge

import (
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

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
