package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/peer"
)

// Over HTTP/1.1 about twenty of these calls were lost on connections the
// stopping endpoint closed while they were being sent; HTTP/2's GOAWAY
// hands them back to the client, which sends them again.
var _ = Describe("Calls racing the owner's shutdown", func() {
	It("are either answered or not sent, never lost on a connection the owner closed", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "replica-a", newLocals())
		bLocal := newLocals()
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`)}
		bLocal.set("team", "team/search", owner)
		b := startReplica(ns, "replica-b", bLocal)
		to := b.target()
		var answered, notSent atomic.Int64
		var mu sync.Mutex
		var lost []error // neither answered nor known not to have run
		callers, stop := 16, make(chan struct{})
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _, err := a.Client().Call(context.WithoutCancel(ctx), to, peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
					switch {
					case err == nil:
						answered.Add(1)
					case errors.Is(err, peer.ErrNotSent):
						notSent.Add(1)
					default:
						mu.Lock()
						lost = append(lost, errors.Join(err.(interface{ Unwrap() []error }).Unwrap()...))
						mu.Unlock()
					}
				}
			})
		}
		Eventually(answered.Load).Should(BeNumerically(">", 200))
		Expect(b.stop()).To(Succeed())
		Eventually(notSent.Load).Should(BeNumerically(">", 100))
		close(stop)
		wg.Wait()
		GinkgoWriter.Printf("answered %d, not sent %d, lost %d: %v\n", answered.Load(), notSent.Load(), len(lost), lost)
		Expect(lost).To(BeEmpty())
		Expect(owner.recorded()).To(HaveLen(int(answered.Load())), "each call ran once, and only those answered")
	})
})
