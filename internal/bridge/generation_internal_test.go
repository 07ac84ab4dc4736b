package bridge

import (
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestASyncerRunsOnlyWhileASyncIsPending checks the generation's syncer
// lifecycle: none before the generation is live (a kick then waits), one
// per pending wake, gone once nothing is pending, and none once closing.
func TestASyncerRunsOnlyWhileASyncIsPending(t *testing.T) {
	g := NewWithT(t)
	gen := newGeneration(1)
	var started, running atomic.Int32
	release := make(chan struct{})
	syncer := func() {
		started.Add(1)
		running.Add(1)
		defer running.Add(-1)
		for {
			select {
			case <-gen.resync:
				<-release
			case <-gen.retry:
			default:
				if gen.doneSyncing() {
					return
				}
			}
		}
	}

	gen.wake(gen.resync)
	g.Consistently(started.Load, 50*time.Millisecond).Should(BeZero(), "a syncer before the generation is live")
	gen.startSyncing(syncer)
	g.Eventually(started.Load).Should(BeEquivalentTo(1), "the kick of the first sync is served once live")
	gen.wake(gen.retry)
	gen.wake(gen.resync)
	g.Consistently(started.Load, 50*time.Millisecond).Should(BeEquivalentTo(1), "a second syncer beside a running one")
	close(release)
	g.Eventually(running.Load).Should(BeZero(), "the syncer stays after its work is done")
	g.Expect(gen.resync).To(BeEmpty())
	g.Expect(gen.retry).To(BeEmpty())

	gen.wake(gen.retry)
	g.Eventually(started.Load).Should(BeEquivalentTo(2), "a wake after the syncer returned")
	g.Eventually(running.Load).Should(BeZero())

	gen.shutdown()
	gen.wake(gen.resync)
	g.Consistently(started.Load, 50*time.Millisecond).Should(BeEquivalentTo(2), "a syncer of a closing generation")
}
