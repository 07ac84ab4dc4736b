package gctune

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestGOGCHoldsWhatWasAllocated(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name                 string
		allocated, scannable uint64
		ceiling              int
		want                 int
	}{
		{"quiet: the floor", mb, 100 * mb, 50, quietGCFloor},
		{"30 MB over 100 MB", 30 * mb, 100 * mb, 50, 30},
		{"a share rounds up", 30 * mb, 70 * mb, 50, 43},
		{"busy: the ceiling", 300 * mb, 100 * mb, 50, 50},
		{"60 MB over 100 MB: the ceiling", 60 * mb, 100 * mb, 50, 50},
		{"60 MB over 100 MB under the runtime's default", 60 * mb, 100 * mb, 100, 60},
		{"busy: a ceiling above the runtime's default", 300 * mb, 100 * mb, 200, 200},
		{"nothing read yet", mb, 0, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gogcFor(tc.allocated, tc.scannable, tc.ceiling); got != tc.want {
				t.Fatalf("gogcFor = %d, want %d", got, tc.want)
			}
		})
	}
}

// While busy, the heap grows by --gc-busy-percent of what is live, but by
// at least minBusyHeadroom: a small heap keeps the runtime's default.
func TestBusyGOGCKeepsALeastHeadroom(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name      string
		percent   int
		scannable uint64
		want      int
	}{
		{"a large heap: the percent", 40, 200 * mb, 40},
		{"40% of 80 MB is the least", 40, 80 * mb, 40},
		{"a middling heap: raised to the least", 40, 50 * mb, 64},
		{"a small heap: the runtime's default", 40, 20 * mb, defaultGOGC},
		{"nothing read yet", 40, 0, defaultGOGC},
		{"a percent above the default is kept", 150, 20 * mb, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := busyGOGC(tc.percent, tc.scannable, 32*mb); got != tc.want {
				t.Fatalf("busyGOGC = %d, want %d", got, tc.want)
			}
		})
	}
}

// Until the window is full, the reads taken so far stand for the whole
// window: a manager's first seconds are not taken for quiet ones.
func TestOverWindowScalesAWindowNotYetFull(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reads  []uint64
		window int
		want   uint64
	}{
		{"one read", []uint64{100}, 10, 0},
		{"one second of ten", []uint64{100, 150}, 10, 500},
		{"five of ten", []uint64{0, 10, 20, 30, 40, 50}, 10, 100},
		{"full", []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overWindow(tc.reads, tc.window); got != tc.want {
				t.Fatalf("overWindow = %d, want %d", got, tc.want)
			}
		})
	}
}

// The runtime's own GOGC falls while the process allocates little, comes
// back to --gc-busy-percent in a burst, and is given back when the manager
// stops; the heap's free pages are returned once after each burst.
func TestQuietGCFollowsTheRuntimesAllocationRate(t *testing.T) {
	g := NewWithT(t)
	const busy = 60
	q := New(Flags{QuietHeadroom: 200 * time.Millisecond, BusyPercent: busy})
	g.Expect(q).NotTo(BeNil(), "GOGC is set in the test's environment")
	q.leastBusy = 0 // the test's heap is small: no least headroom, so that the busy GOGC shows
	q.every = 20 * time.Millisecond
	var releases atomic.Int32
	release := q.release
	q.release = func() { releases.Add(1); release() }
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = q.Start(ctx)
	}()

	g.Expect(runtimeGOGC()).To(Equal(100), "the runtime's default before the manager starts")
	g.Eventually(runtimeGOGC).Should(BeNumerically("<", busy), "GOGC while quiet")
	g.Eventually(releases.Load).Should(BeEquivalentTo(1), "pages returned once the start's burst is over")

	burst, burstOver := context.WithCancel(t.Context())
	defer burstOver()
	allocating := make(chan struct{})
	go func() {
		defer close(allocating)
		allocateUntil(burst)
	}()
	g.Eventually(runtimeGOGC).Should(Equal(busy), "GOGC in a burst")
	burstOver()
	<-allocating
	g.Eventually(runtimeGOGC).Should(BeNumerically("<", busy), "GOGC once the burst is over")
	g.Eventually(releases.Load).Should(BeEquivalentTo(2), "pages returned once the burst is over")

	cancel()
	<-stopped
	g.Expect(runtimeGOGC()).To(Equal(100), "the runtime's GOGC once stopped")
}

// allocateUntil allocates a 1 MiB buffer at a time, each garbage at once,
// until ctx ends.
func allocateUntil(ctx context.Context) {
	for ctx.Err() == nil {
		sink = make([]byte, 1<<20)
	}
}

var sink []byte

func runtimeGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
