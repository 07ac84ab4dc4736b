package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// generation is one MCP session over one freshly built transport: a new
// child process, or a new HTTP session. It is used once; a reconnect builds
// the next one. See doc.go for who starts, loses and closes it.
type generation struct {
	num  int64
	ctx  context.Context // ends when the supervisor closes the generation
	stop context.CancelFunc
	link link
	sess *mcp.ClientSession

	sessDone chan struct{} // closed when sess.Wait returned
	sessErr  error         // what sess.Wait returned; set before sessDone closes
	resync   chan struct{} // list_changed, coalesced
	retry    chan struct{} // publish a refused set again, coalesced
	health   healthChecks
	// syncer re-syncs and publishes again (resyncLoop), set once the
	// generation is live; syncing is true while it runs. lastResync is
	// when the latest re-sync started (its rate limit outlives each run).
	syncer     func()
	syncing    bool
	lastResync time.Time
	// failedResyncs counts the re-syncs that failed in a row (the syncer's
	// alone); resyncRetry asks for the next try after a failed one.
	failedResyncs int
	resyncRetry   *time.Timer

	mu      sync.Mutex // guards syncer, syncing, resyncRetry and closing, and orders goFn before wg.Wait
	closing bool       // no goroutine starts any more
	wg      sync.WaitGroup

	lostOnce sync.Once
	lost     chan struct{}
	lostErr  *StageError
	lostAt   time.Time   // when serve saw the loss
	fetched  []*mcp.Tool // the latest complete fetch, for a retried swap
	refused  refusal     // why the latest fetch was refused, when it was (then fetched is nil)
	// opening is true until the supervisor calls the generation
	// connected; guarded by the supervisor's mu. See publish.
	opening bool

	closeOnce sync.Once
	down      chan struct{} // closed once nothing of the generation runs any more
}

func newGeneration(num int64) *generation {
	ctx, stop := context.WithCancel(context.Background())
	return &generation{
		num: num, ctx: ctx, stop: stop,
		sessDone: make(chan struct{}),
		resync:   make(chan struct{}, 1),
		retry:    make(chan struct{}, 1),
		lost:     make(chan struct{}),
		down:     make(chan struct{}),
	}
}

// lose reports the connection gone, with the stage that saw it. It is the
// only way a loss is raised (doc.go lists the goroutines that call it);
// only the first report counts, and none once the supervisor itself is
// closing the generation, because then nothing is lost.
func (g *generation) lose(stage string, err error) {
	if g.ctx.Err() != nil {
		return
	}
	g.lostOnce.Do(func() {
		g.lostErr = newStageError(stage, err)
		close(g.lost)
	})
}

// goFn runs fn as one of the generation's goroutines, awaited on close;
// once the generation closes it runs nothing.
func (g *generation) goFn(fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.goLocked(fn)
}

func (g *generation) goLocked(fn func()) {
	if g.closing {
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
}

// wake kicks ch (g.resync or g.retry) and runs the syncer unless it runs
// or the generation is not live yet (its first sync is under way; the kick
// waits for startSyncing): an idle connection keeps no goroutine for the
// syncs it may never need (docs/design.md, "Replicas and ownership": memory).
func (g *generation) wake(ch chan struct{}) {
	kick(ch)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.syncer != nil && !g.syncing {
		g.runSyncerLocked()
	}
}

// startSyncing makes syncer the one wake runs from now on, and runs it
// for a kick that came during the first sync.
func (g *generation) startSyncing(syncer func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.syncer = syncer
	if g.pendingLocked() {
		g.runSyncerLocked()
	}
}

func (g *generation) runSyncerLocked() {
	g.syncing = true
	g.goLocked(g.syncer)
}

func (g *generation) pendingLocked() bool { return len(g.resync) > 0 || len(g.retry) > 0 }

// resyncAfter asks for a re-sync in d, in place of any asked for before,
// unless the generation closes first.
func (g *generation) resyncAfter(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closing:
	case g.resyncRetry == nil:
		g.resyncRetry = time.AfterFunc(d, func() { g.wake(g.resync) })
	default:
		g.resyncRetry.Reset(d)
	}
}

// stopResyncRetry drops a re-sync asked for by resyncAfter.
func (g *generation) stopResyncRetry() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopResyncRetryLocked()
}

func (g *generation) stopResyncRetryLocked() {
	if g.resyncRetry != nil {
		g.resyncRetry.Stop()
	}
}

// doneSyncing reports whether the syncer may return: nothing is pending.
// A kick that came meanwhile keeps it on, since its wake saw it running.
func (g *generation) doneSyncing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pendingLocked() {
		return false
	}
	g.syncing = false
	return true
}

// shutdown starts closing the generation, once, and returns its down
// signal: closed when the session has ended, the link reports closed (for
// stdio: the child has been reaped) and every goroutine of the generation
// has returned. Calls in flight are cancelled first, so that closing the
// session cannot wait on them.
func (g *generation) shutdown() <-chan struct{} {
	g.closeOnce.Do(func() {
		g.stop()
		g.mu.Lock()
		g.closing = true
		g.stopResyncRetryLocked()
		g.mu.Unlock()
		g.stopHealth()
		go func() {
			if g.sess != nil {
				_ = g.sess.Close()
				<-g.sessDone
				listening.Delete(g.sess)
			}
			if g.link != nil {
				<-g.link.closed()
			}
			g.wg.Wait()
			close(g.down)
		}()
		if g.link != nil {
			g.link.close()
		}
	})
	return g.down
}

// isDown reports whether the generation has closed completely.
func (g *generation) isDown() bool {
	select {
	case <-g.down:
		return true
	default:
		return false
	}
}

// kick sends on a coalescing channel without blocking.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
