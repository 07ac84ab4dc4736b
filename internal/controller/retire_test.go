package controller_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/bridge"
	toolregistry "github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// StopWhenIdle, a handoff's stop, lets the calls in flight finish, but
// refuses every call that reaches the supervisor from its start on, before
// making it: a call that passed the route's look for the holder just before
// the stop goes to the new holder instead of failing on the closing
// connection (docs/design.md, "Replicas and ownership", handoff).
var _ = Describe("Stopping a supervisor for a handoff", func() {
	// callingSupervisor is a Ready server's supervisor with a sleep call
	// of ms in flight, whose outcome comes on the channel.
	callingSupervisor := func(ctx SpecContext, ms int) (client.ObjectKey, *bridge.Supervisor, <-chan error) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		readyAt(ns, "fx", 1)
		key := client.ObjectKey{Namespace: ns, Name: "fx"}
		sup := sups.Get(key)
		Expect(sup).NotTo(BeNil())
		inFlight := make(chan error, 1)
		go func() {
			res, err := sup.CallTool(context.WithoutCancel(ctx), fixture.ToolSleep, map[string]any{"ms": ms})
			if err == nil && res.IsError {
				err = errors.New(bridge.RenderText(res))
			}
			inFlight <- err
		}()
		Eventually(sup.InFlight, eventuallyTimeout, poll).Should(Equal(1))
		return key, sup, inFlight
	}

	It("answers the call in flight and refuses the next one as not served here", func(ctx SpecContext) {
		key, sup, inFlight := callingSupervisor(ctx, 500)
		stopped := make(chan error, 1)
		go func() { stopped <- sups.StopWhenIdle(context.WithoutCancel(ctx), key) }()

		Eventually(func() error {
			_, err := sup.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": "x"})
			return err
		}, eventuallyTimeout, poll).Should(MatchError(toolregistry.ErrNotServing))
		Expect(<-inFlight).To(Succeed(), "the call in flight when the stop began")
		Expect(<-stopped).To(Succeed())
	})

	It("serves calls again when its context ends before the stop", func(ctx SpecContext) {
		key, sup, inFlight := callingSupervisor(ctx, 1000)
		ended, end := context.WithCancel(ctx)
		end()
		Expect(sups.StopWhenIdle(ended, key)).To(MatchError(context.Canceled))

		_, err := sup.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": "x"})
		Expect(err).NotTo(HaveOccurred(), "the supervisor was not stopped, so it serves")
		Expect(<-inFlight).To(Succeed())
		Expect(sups.Get(key)).To(BeIdenticalTo(sup))
	})
})
