package gctune

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Quiet is a manager.Runnable that sets the runtime's GOGC from what the
// process allocated in the last headroom interval (see the package's
// documentation); the GOGC it found comes back when its context ends.
type Quiet struct {
	headroom    time.Duration // the interval whose allocation the headroom holds
	busyPercent int           // GOGC while busy: --gc-busy-percent
	leastBusy   uint64        // the least headroom while busy: minBusyHeadroom
	every       time.Duration // how often the allocation is read
	read        func() heapSample
	set         func(percent int) (previous int)
	release     func() // returns the heap's free pages to the OS
}

// NeedLeaderElection is false: every replica collects its own garbage.
func (*Quiet) NeedLeaderElection() bool { return false }

// heapSample is what Quiet reads of the runtime.
type heapSample struct {
	allocated uint64 // bytes allocated since the process started
	scannable uint64 // live heap, stacks and globals: what GOGC is a share of
}

const (
	// quietGCFloor is the least GOGC: each collection costs CPU in
	// proportion to the live heap.
	quietGCFloor = 10
	// defaultGOGC is the runtime's default.
	defaultGOGC = 100
	// minBusyHeadroom is the least a busy manager's heap may grow between
	// collections. A share of a small heap is a few megabytes, which a
	// manager busy with large results allocates many times a second, and
	// every collection pays its fixed costs (every goroutine's stack)
	// again, to save bytes that do not set any peak worth sizing for.
	minBusyHeadroom = 32 << 20
)

// New is nil when the headroom is 0 or GOGC is set: then the runtime's own
// setting stays. f must be valid (Flags.Validate).
func New(f Flags) *Quiet {
	if f.QuietHeadroom <= 0 || os.Getenv("GOGC") != "" {
		return nil
	}
	return &Quiet{headroom: f.QuietHeadroom, busyPercent: f.BusyPercent, leastBusy: minBusyHeadroom, every: time.Second,
		read: readHeap, set: debug.SetGCPercent, release: debug.FreeOSMemory}
}

// Start samples the allocation rate until ctx ends, then gives the runtime
// back the GOGC it had.
func (q *Quiet) Start(ctx context.Context) error {
	current := busyGOGC(q.busyPercent, q.read().scannable, q.leastBusy)
	previous := q.set(current)
	defer q.set(previous)
	ctrl.LoggerFrom(ctx).Info("GOGC follows the allocation while quiet", "headroom", q.headroom, "busyPercent", q.busyPercent)

	ticker := time.NewTicker(q.every)
	defer ticker.Stop()
	// allocated holds the reads of the last headroom, oldest first.
	allocated := []uint64{q.read().allocated}
	window := max(int(q.headroom/q.every), 1)
	burst := true // the manager starts busy: connecting every server
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			s := q.read()
			if len(allocated) > window {
				allocated = allocated[1:]
			}
			allocated = append(allocated, s.allocated)
			ceiling := busyGOGC(q.busyPercent, s.scannable, q.leastBusy)
			g := gogcFor(overWindow(allocated, window), s.scannable, ceiling)
			if g == current {
				continue
			}
			q.set(g)
			// A burst has ended: what it took is given back now, not over
			// the minutes the runtime's scavenger would take.
			if burst && g <= max(ceiling/2, quietGCFloor) {
				q.release()
				burst = false
			}
			burst = burst || g == ceiling
			current = g
		}
	}
}

// overWindow is what reads (cumulative, one a sample, oldest first)
// allocated over a window of that many samples: while fewer have been
// taken, what they show, scaled to the whole window.
func overWindow(reads []uint64, window int) uint64 {
	n := len(reads) - 1
	if n <= 0 {
		return 0
	}
	return (reads[n] - reads[0]) / uint64(n) * uint64(window)
}

// busyGOGC is the GOGC while busy: percent, raised so that the headroom is
// at least least bytes of scannable, but not above the runtime's default
// unless percent is.
func busyGOGC(percent int, scannable, least uint64) int {
	if percent >= defaultGOGC {
		return percent
	}
	if scannable == 0 {
		return defaultGOGC
	}
	g := int(math.Ceil(100 * float64(least) / float64(scannable)))
	return min(max(percent, g), defaultGOGC)
}

// gogcFor is the GOGC whose headroom holds allocated bytes, between
// quietGCFloor and ceiling.
func gogcFor(allocated, scannable uint64, ceiling int) int {
	if scannable == 0 {
		return ceiling
	}
	g := math.Ceil(100 * float64(allocated) / float64(scannable))
	return int(min(max(g, quietGCFloor), float64(ceiling)))
}

var heapMetrics = []string{"/gc/heap/allocs:bytes", "/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

func readHeap() heapSample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapSample{allocated: v(0), scannable: v(1) + v(2) + v(3)}
}
