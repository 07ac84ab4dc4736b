package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/test/fixture"
)

// syncCounter counts the supervisor's tool syncs.
type syncCounter struct {
	mu sync.Mutex
	n  int
}

func (c *syncCounter) ToolCall(string, time.Duration) {}
func (c *syncCounter) ToolSync(bool, time.Duration) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *syncCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A storm of list_changed costs at most one re-sync per ResyncInterval, and
// the change it announces is still synced.
func TestListChangedStormIsCoalescedToOneResyncPerInterval(t *testing.T) {
	const interval = 100 * time.Millisecond
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	obs := &syncCounter{}
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Observer = obs; o.ResyncInterval = interval })
	waitFor(t, s, "Ready", isReady)
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	before := obs.count()

	start := time.Now()
	storm := time.NewTicker(time.Millisecond)
	for range 400 {
		<-storm.C
		g.wake(g.resync)
	}
	storm.Stop()
	elapsed := time.Since(start)
	got := obs.count() - before
	// One sync may have started before the storm's last interval ended.
	if limit := int(elapsed/interval) + 2; got > limit {
		t.Fatalf("%d re-syncs in %v of list_changed, want at most %d (one per %v)", got, elapsed, limit, interval)
	}
	NewWithT(t).Eventually(obs.count, eventually).Should(BeNumerically(">", before), "the storm was never synced")
}

// Every session is opened by the one SDK client, whose list_changed
// handler finds the generation by its session: a live generation is found,
// and a closed one is forgotten, over both transports.
func TestASessionIsFoundByItsGenerationUntilItCloses(t *testing.T) {
	forEachTransport(t, func(t *testing.T, p *policy.Policy) {
		g := NewWithT(t)
		s, _ := startSupervisor(t, p)
		waitFor(t, s, "Ready", isReady)
		s.mu.Lock()
		gen := s.live
		s.mu.Unlock()
		found, ok := listening.Load(gen.sess)
		g.Expect(ok).To(BeTrue(), "the live session")
		g.Expect(found).To(BeIdenticalTo(gen))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Expect(s.Dispose(ctx)).To(Succeed())
		_, ok = listening.Load(gen.sess)
		g.Expect(ok).To(BeFalse(), "the closed session")
	})
}

// A real storm over Streamable HTTP, one list_changed per change of the
// upstream's list, is re-synced again and again while it goes on, each
// re-sync publishing the list as it then is.
func TestAStormingUpstreamIsResyncedWhileItStorms(t *testing.T) {
	const interval = 100 * time.Millisecond
	up := httpServe(t, httpFixture(t, fixture.Options{ListChangedEvery: fixture.MinListChangedEvery}))
	obs := &syncCounter{}
	s, reg := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Observer = obs; o.ResyncInterval = interval })
	waitFor(t, s, "Ready", isReady)
	before := obs.count()
	descriptions := map[string]bool{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(obs.count() - before).To(BeNumerically(">=", 5))
		for _, tl := range reg.Tools("ns") {
			if tl.Upstream().Name == fixture.ToolLate {
				descriptions[tl.Upstream().Description] = true
			}
		}
		g.Expect(len(descriptions)).To(BeNumerically(">=", 3), "the late tool as published, one description per re-sync")
	}, eventually, interval/2).Should(Succeed())
}
