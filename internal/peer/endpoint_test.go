package peer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/peer"
	"github.com/mcpbridge/operator/internal/registry"
)

// A result whose bytes a re-encoding would change (spacing, key order).
const oddResult = `{"content":[{"type":"text","text":"hi"}],  "structuredContent":{"z":1,"a":[2, 3]}}`

var _ = Describe("Forwarding a call to the owning replica", func() {
	var ns string
	var a, b *running
	var bLocal *locals
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		bLocal = newLocals()
		a = startReplica(ns, "replica-a", newLocals())
		b = startReplica(ns, "replica-b", bLocal)
	})

	It("runs the call once on the owner's local caller and returns its result byte for byte", func(ctx SpecContext) {
		owner := &jsonCaller{result: json.RawMessage(oddResult)}
		bLocal.set("team", "team/search", owner)
		args := `{"q":  "x", "n":1}`
		res, isError, err := a.Client().Call(ctx, b.target(),
			peer.Call{Namespace: "team", Owner: "team/search", Tool: "find", Arguments: json.RawMessage(args)})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(res)).To(Equal(oddResult))
		Expect(isError).To(BeFalse())
		Expect(owner.recorded()).To(Equal([]recorded{{tool: "find", args: args}}))
	})

	It("passes a tool error through as one", func(ctx SpecContext) {
		bLocal.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[],"isError":true}`), isError: true})
		res, isError, err := a.Client().Call(ctx, b.target(), peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
		Expect(err).NotTo(HaveOccurred())
		Expect(isError).To(BeTrue())
		Expect(string(res)).To(Equal(`{"content":[],"isError":true}`))
	})

	It("calls through CallTool for a caller without the JSON path, or when the forwarder was called so", func(ctx SpecContext) {
		viaSDK := &jsonCaller{result: json.RawMessage(`{"content":[{"type":"text","text":"sdk"}]}`)}
		bLocal.set("team", "team/plain", sdkOnly{viaSDK})
		asked := &jsonCaller{result: json.RawMessage(`{"content":[{"type":"text","text":"sdk"}]}`)}
		bLocal.set("team", "team/headers", asked)
		for owner, sdk := range map[string]bool{"team/plain": false, "team/headers": true} {
			res, _, err := a.Client().Call(ctx, b.target(),
				peer.Call{Namespace: "team", Owner: owner, Tool: "t", Arguments: json.RawMessage(`{"k":"v"}`), SDK: sdk})
			Expect(err).NotTo(HaveOccurred())
			Expect(string(res)).To(ContainSubstring(`"text":"sdk"`))
		}
		Expect(viaSDK.recorded()).To(Equal([]recorded{{tool: "t", args: `{"k":"v"}`, sdk: true}}))
		Expect(asked.recorded()).To(Equal([]recorded{{tool: "t", args: `{"k":"v"}`, sdk: true}}))
	})

	It("answers ErrNotServedHere when the replica has no local caller for the owner", func(ctx SpecContext) {
		before := metricValue("mcpbridge_replica_forwards_total", "outcome", "not_owner")
		_, _, err := a.Client().Call(ctx, b.target(), peer.Call{Namespace: "team", Owner: "team/elsewhere", Tool: "find"})
		Expect(err).To(MatchError(peer.ErrNotServedHere))
		Expect(metricValue("mcpbridge_replica_forwards_total", "outcome", "not_owner")).To(Equal(before + 1))
	})

	It("answers ErrNotServedHere when the local caller was retired for a handoff, so that the sender sends the call on", func(ctx SpecContext) {
		bLocal.set("team", "team/moving", &jsonCaller{err: fmt.Errorf("tools-call: %w", registry.ErrNotServing)})
		before := metricValue("mcpbridge_replica_forwards_total", "outcome", "not_owner")
		_, _, err := a.Client().Call(ctx, b.target(), peer.Call{Namespace: "team", Owner: "team/moving", Tool: "find"})
		Expect(err).To(MatchError(peer.ErrNotServedHere))
		Expect(metricValue("mcpbridge_replica_forwards_total", "outcome", "not_owner")).To(Equal(before + 1))
	})

	It("counts a call's result into the owner's budget until it is sent, and refuses one that would pass it", func(ctx SpecContext) {
		pool := &testPool{max: 1 << 10}
		owner := startReplica(ns, "replica-c", bLocal, withResults(pool))
		text := func(n int) string { return `{"content":[{"type":"text","text":"` + strings.Repeat("x", n) + `"}]}` }
		small := text(512)
		bLocal.set("team", "team/small", &jsonCaller{result: json.RawMessage(small)})
		bLocal.set("team", "team/large", &jsonCaller{result: json.RawMessage(text(2 << 10))})
		for _, sdk := range []bool{false, true} {
			By(fmt.Sprintf("through the SDK: %t", sdk))
			res, _, err := a.Client().Call(ctx, owner.target(), peer.Call{Namespace: "team", Owner: "team/small", Tool: "find", SDK: sdk})
			Expect(err).NotTo(HaveOccurred())
			Expect(string(res)).To(MatchJSON(small))
			Expect(pool.held.Load()).To(BeZero(), "given back once the answer was sent")
			_, _, err = a.Client().Call(ctx, owner.target(), peer.Call{Namespace: "team", Owner: "team/large", Tool: "find", SDK: sdk})
			var callErr *peer.CallError
			Expect(errors.As(err, &callErr)).To(BeTrue(), "got %v", err)
			Expect(err.Error()).To(ContainSubstring("budget of result bytes held in memory is spent on the replica that owns the server, for the calls of namespace team"))
			Expect(pool.held.Load()).To(BeZero())
		}
	})

	It("returns the owner's error message, typed", func(ctx SpecContext) {
		bLocal.set("team", "team/search", &jsonCaller{err: errors.New("the server is not connected (stage: tools/call)")})
		_, _, err := a.Client().Call(ctx, b.target(), peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
		var callErr *peer.CallError
		Expect(errors.As(err, &callErr)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(Equal("the server is not connected (stage: tools/call)"))
	})

	It("refuses a body over the bound without calling the owner", func(ctx SpecContext) {
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`)}
		bLocal.set("team", "team/search", owner)
		big := `{"s":"` + strings.Repeat("x", peer.MaxBodyBytes) + `"}`
		_, _, err := a.Client().Call(ctx, b.target(), peer.Call{Namespace: "team", Owner: "team/search", Tool: "find", Arguments: json.RawMessage(big)})
		Expect(err).To(MatchError(ContainSubstring("413")))
		Expect(owner.recorded()).To(BeEmpty())
	})

	It("finishes a call in flight when the owner stops, and then accepts none", func(ctx SpecContext) {
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`), block: make(chan struct{}), started: make(chan struct{}, 1)}
		bLocal.set("team", "team/slow", owner)
		type outcome struct {
			res []byte
			err error
		}
		got := make(chan outcome, 1)
		go func() {
			res, _, err := a.Client().Call(context.WithoutCancel(ctx), b.target(), peer.Call{Namespace: "team", Owner: "team/slow", Tool: "wait"})
			got <- outcome{res, err}
		}()
		Eventually(owner.started).Should(Receive())
		target := b.target()
		stopped := make(chan error, 1)
		go func() { stopped <- b.stop() }()
		Consistently(stopped, 200*time.Millisecond).ShouldNot(Receive(), "the endpoint waits for the call in flight")
		close(owner.block)
		Eventually(got).Should(Receive(Equal(outcome{res: []byte(`{"content":[]}`)})))
		Eventually(stopped).Should(Receive(BeNil()))
		_, _, err := a.Client().Call(ctx, target, peer.Call{Namespace: "team", Owner: "team/slow", Tool: "wait"})
		Expect(err).To(MatchError(peer.ErrUnreachable))
		Expect(err).To(MatchError(peer.ErrNotSent))
	})

	It("answers only POST on its one route, over HTTP/2", func(ctx SpecContext) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(replicaCA(ctx, ns), replicaCA(ctx, ns)), ForceAttemptHTTP2: true}}
		DeferCleanup(hc.CloseIdleConnections)
		base := "https://" + b.target().Address
		for _, tc := range []struct {
			method, path string
			want         int
		}{
			{http.MethodGet, peer.CallPath, http.StatusMethodNotAllowed},
			{http.MethodPost, "/other", http.StatusNotFound},
			{http.MethodPost, peer.CallPath, http.StatusBadRequest}, // not JSON
		} {
			req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, bytes.NewReader([]byte("nope")))
			Expect(err).NotTo(HaveOccurred())
			resp, err := hc.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Body.Close()).To(Succeed())
			Expect(resp.StatusCode).To(Equal(tc.want), "%s %s", tc.method, tc.path)
			Expect(resp.ProtoMajor).To(Equal(2), "the endpoint speaks HTTP/2")
		}
		Expect(bLocal.lookupCount()).To(BeZero())
	})
})
