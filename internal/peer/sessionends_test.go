package peer_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/peer"
)

var _ = Describe("Ended agent sessions", func() {
	It("reach every live replica, one that could not be reached once it can, and one that joins later", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		live := &liveSet{}
		a, b := startRelay(ns, "replica-a", live), startRelay(ns, "replica-b", live)
		live.set(a.target(), b.target())
		until := time.Now().Add(time.Hour).UTC()

		a.ends.Ended([]string{"k1", "k2"}, until)
		Eventually(b.gateway.keys).Should(HaveKeyWithValue("k1", until))
		Expect(b.gateway.keys()).To(HaveKey("k2"))

		// More than one request holds: they go in several.
		many := make([]string, 5000)
		for i := range many {
			many[i] = fmt.Sprintf("many-%d", i)
		}
		b.ends.Ended(many, until)
		Eventually(a.gateway.keys).Should(And(HaveKey("many-0"), HaveKey("many-4999")))

		// c is live but cannot be reached yet (no address): the others'
		// ends wait for it, and an end that expired meanwhile is not sent.
		c := startRelay(ns, "replica-c", live)
		live.set(a.target(), b.target(), peer.Target{Name: "replica-c"})
		a.ends.Ended([]string{"k3"}, until)
		a.ends.Ended([]string{"expired"}, time.Now().Add(-time.Second))
		Eventually(b.gateway.keys).Should(HaveKey("k3"))
		Expect(c.gateway.keys()).To(BeEmpty())

		// a goes before c can be reached: b, which was told, tells c.
		live.set(b.target(), peer.Target{Name: "replica-c"})
		a.stop()
		live.set(b.target(), c.target())
		Eventually(func() int { return len(c.gateway.keys()) }).Should(Equal(len(many) + 3))
		Expect(c.gateway.keys()).To(And(HaveKey("k1"), HaveKey("k3"), HaveKey("many-4999"), Not(HaveKey("expired"))))
		Expect(b.gateway.keys()).NotTo(HaveKey("expired"))

		// d joins after all that: it learns every end still in force, each
		// once, though b and c both tell it.
		d := startRelay(ns, "replica-d", live)
		live.set(b.target(), c.target(), d.target())
		Eventually(func() int { return len(d.gateway.keys()) }).Should(Equal(len(many) + 3))
		Eventually(func() int { return d.gateway.applied() }).Should(BeNumerically(">=", 2*(len(many)+3)), "told by b and by c")
		// An end is applied before it is learnt, batch by batch.
		Eventually(d.ends.Known).Should(Equal(len(many) + 3))

		// d's process is replaced under its name before its peers saw it
		// go: another process, told everything again.
		d.stop()
		d2 := startRelay(ns, "replica-d", live)
		again := d2.target()
		again.Process = "second"
		live.set(b.target(), c.target(), again)
		Eventually(func() int { return len(d2.gateway.keys()) }).Should(Equal(len(many) + 3))
	})

	It("never keeps an end that can no longer be taken up, so never sends one", func() {
		ends := peer.NewSessionEnds(peer.SessionEndsConfig{Self: "replica-a", Apply: func(map[string]time.Time) {}})
		ends.Ended([]string{"expired"}, time.Now().Add(-time.Second))
		ends.Received([]peer.EndedSession{{Key: "expired-elsewhere", Until: time.Now().Add(-time.Second)}})
		Expect(ends.Known()).To(BeZero())
		ends.Ended([]string{"live"}, time.Now().Add(time.Hour))
		Expect(ends.Known()).To(Equal(1))
	})

	It("is refused beyond the bound of one request", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		live := &liveSet{}
		a, b := startRelay(ns, "replica-a", live), startRelay(ns, "replica-b", live)
		tooMany := make([]peer.EndedSession, 4097)
		for i := range tooMany {
			tooMany[i] = peer.EndedSession{Key: fmt.Sprint(i), Until: time.Now().Add(time.Hour)}
		}
		Expect(a.Client().SendEnded(ctx, b.target(), tooMany)).To(MatchError(ContainSubstring("413")))
		Expect(b.gateway.keys()).To(BeEmpty())
	})
})

// liveSet is the replicas' membership as the relays see it.
type liveSet struct {
	mu      sync.Mutex
	targets []peer.Target
}

func (l *liveSet) set(t ...peer.Target) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.targets = t
}

func (l *liveSet) members() []peer.Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]peer.Target(nil), l.targets...)
}

// endedGateway stands for a replica's gateway: the sessions it was told
// another replica ended, by key.
type endedGateway struct {
	mu    sync.Mutex
	ended map[string]time.Time
	count int
}

func (g *endedGateway) apply(ended map[string]time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, until := range ended {
		g.ended[k] = until.UTC()
		g.count++
	}
}

// applied counts the ends applied, the same one told twice included.
func (g *endedGateway) applied() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count
}

func (g *endedGateway) keys() map[string]time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]time.Time, len(g.ended))
	for k, v := range g.ended {
		out[k] = v
	}
	return out
}

// relaying is a replica with its relay of ended sessions running.
type relaying struct {
	*running
	ends    *peer.SessionEnds
	gateway *endedGateway
	stopRun context.CancelFunc
}

func (r *relaying) stop() {
	r.stopRun()
	Expect(r.running.stop()).To(Succeed())
}

// startRelay runs replica name with a SessionEnds over live, until the
// spec ends.
func startRelay(ns, name string, live *liveSet) *relaying {
	GinkgoHelper()
	r := &relaying{gateway: &endedGateway{ended: map[string]time.Time{}}}
	r.running = startReplica(ns, name, newLocals(), func(c *peer.Config) {
		c.Ended = func(e []peer.EndedSession) { r.ends.Received(e) }
	})
	r.ends = peer.NewSessionEnds(peer.SessionEndsConfig{Self: name, Members: live.members, Send: r.Client().SendEnded,
		Apply: r.gateway.apply, Every: 50 * time.Millisecond, Log: GinkgoLogr.WithName(name)})
	ctx, cancel := context.WithCancel(context.Background())
	r.stopRun = cancel
	done := make(chan error, 1)
	go func() { done <- r.ends.Start(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(Receive(BeNil()))
	})
	return r
}
