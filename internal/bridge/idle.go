package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// Idle servers: a stdio server with spec.idle.suspendAfterMs sleeps after
// that long without a tools/call, and the next call wakes it. This file
// holds the bookkeeping: calls in flight and the time of the last one, the
// idle timer serve runs, and the wake calls wait for. The phase moves in
// machine.go (serve suspends, sleep waits, attempt wakes).
// See docs/design.md, "Idle servers".

// wakeup is one sleep of the server, from the suspend to the end of the
// wake that ends it. Calls that find the server asleep request the wake
// and wait for it together: the first request wakes the server, the others
// only wait.
type wakeup struct {
	once        sync.Once
	requested   chan struct{} // closed by the first call that needs the server
	requestedAt time.Time     // real time; set before requested closes

	finishOnce sync.Once
	done       chan struct{} // closed when the wake has connected or failed
	err        error         // why it failed; set before done closes
}

func newWakeup() *wakeup {
	return &wakeup{requested: make(chan struct{}), done: make(chan struct{})}
}

// request asks for the wake; it reports whether this was the first request.
func (w *wakeup) request() (first bool) {
	w.once.Do(func() {
		w.requestedAt = time.Now()
		close(w.requested)
		first = true
	})
	return first
}

func (w *wakeup) isRequested() bool {
	select {
	case <-w.requested:
		return true
	default:
		return false
	}
}

// finish releases the calls waiting for the wake, once.
func (w *wakeup) finish(err error) {
	w.finishOnce.Do(func() {
		w.err = err
		close(w.done)
	})
}

// errStoppedAsleep is why a wake failed when the supervisor was disposed
// (the McpServer changed or was deleted) before it could connect.
var errStoppedAsleep = errors.New("the server was stopped before it could wake (its McpServer was changed or deleted)")

// SetSuspendAfter changes spec.idle.suspendAfterMs in place: the running
// connection's idle timer follows at once, no reconnect. 0 never suspends;
// a server asleep stays asleep until the next call.
func (s *Supervisor) SetSuspendAfter(d time.Duration) {
	s.suspendAfter.Store(int64(d))
	kick(s.idleChanged)
}

// Sleeping reports whether the server is suspended and no call has asked
// for it yet: the controller keeps a Pod-runtime server's Deployment at 0
// replicas exactly while this holds.
func (s *Supervisor) Sleeping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Phase == v1alpha1.PhaseIdle && s.wake != nil && !s.wake.isRequested()
}

// acquire is the one way a call gets the live generation, and the one
// place that wakes a sleeping server: it counts the call in flight (the
// caller releases it), or, while the server sleeps or is waking, requests
// the wake and waits for it until deadline. This is the function a call
// forwarded from another replica will reach too.
func (s *Supervisor) acquire(ctx context.Context, deadline time.Time) (*generation, error) {
	for {
		s.mu.Lock()
		g, w := s.live, s.wake
		why := ""
		switch {
		case s.retired:
			s.mu.Unlock()
			return nil, newStageError(StageToolsCall, registry.ErrNotServing)
		case g != nil:
			s.inflight++
		case w == nil:
			why = s.downReason()
		}
		s.mu.Unlock()
		switch {
		case g != nil:
			return g, nil
		case w == nil:
			return nil, newStageError(StageToolsCall, fmt.Errorf("%w: %s", ErrUnavailable, why))
		}
		if err := s.awaitWake(ctx, deadline, w); err != nil {
			return nil, s.refusedIfRetired(ctx, err)
		}
	}
}

// refusedIfRetired is registry.ErrNotServing in place of err when the
// supervisor was retired while the call waited for a wake: the stop that
// followed ended the wake, and the call, never made, belongs to the new
// holder.
func (s *Supervisor) refusedIfRetired(ctx context.Context, err error) error {
	s.mu.Lock()
	retired := s.retired
	s.mu.Unlock()
	if retired && ctx.Err() == nil {
		return newStageError(StageToolsCall, registry.ErrNotServing)
	}
	return err
}

// Retire has every call from now on refused before it is made, with
// registry.ErrNotServing; the calls already in flight go on. A server
// handed over to another replica is retired, then stopped once it answers
// no call, so that no call can start between that wait and the stop
// (docs/design.md, "Replicas and ownership", handoff).
func (s *Supervisor) Retire() { s.setRetired(true) }

// Unretire undoes Retire, for a stop that did not happen: the supervisor
// serves calls again.
func (s *Supervisor) Unretire() { s.setRetired(false) }

func (s *Supervisor) setRetired(retired bool) {
	s.mu.Lock()
	s.retired = retired
	s.mu.Unlock()
}

// InFlight is the number of calls the server is answering now.
func (s *Supervisor) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// release ends a call that acquire counted; the idle time starts anew.
func (s *Supervisor) release() {
	s.mu.Lock()
	s.inflight--
	s.lastCall = s.clock.Now()
	s.mu.Unlock()
}

// awaitWake requests w's wake and waits for it, at most until deadline
// (the call's toolCallTimeoutMs: the wake counts against it).
func (s *Supervisor) awaitWake(ctx context.Context, deadline time.Time, w *wakeup) error {
	if w.request() {
		s.log.Info("waking the server for a tool call")
		s.signal() // the controller scales a Pod-runtime server up now
	}
	// Real time, as every request's deadline.
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-w.done:
		if w.err != nil {
			return newStageError(StageToolsCall, fmt.Errorf("%w: waking server %q failed: %s",
				ErrUnavailable, s.p.ServerName, w.err.Error()))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return newStageError(StageToolsCall, errWakeTimeout{timeout: s.p.ToolCallTimeout, why: s.lastErrorSuffix()})
	}
}

// errWakeTimeout: the call's toolCallTimeoutMs ran out while the server was
// still waking; why is what the wake waits for (": ImagePullBackOff ...").
type errWakeTimeout struct {
	timeout time.Duration
	why     string
}

func (e errWakeTimeout) Error() string {
	return fmt.Sprintf("the tool call timed out after %dms while the server was waking%s", e.timeout.Milliseconds(), e.why)
}

func (errWakeTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// idleTimer is serve's timer for the suspend: it fires when the live
// connection may have gone suspendAfterMs without a call, on the
// supervisor's clock.
type idleTimer struct {
	s *Supervisor
	t clock.Timer
}

// C fires when the suspend is due; nil (never) while suspending is off.
func (it *idleTimer) C() <-chan time.Time {
	if it.t == nil {
		return nil
	}
	return it.t.C()
}

// rearm sets the timer for the next moment the suspend may be due: the
// rest of suspendAfterMs since the last call, or a whole suspendAfterMs
// while calls are in flight (each call's end restarts the count).
func (it *idleTimer) rearm() {
	it.stop()
	after := time.Duration(it.s.suspendAfter.Load())
	if after <= 0 {
		return
	}
	it.s.mu.Lock()
	d := after
	if it.s.inflight == 0 {
		d -= it.s.clock.Since(it.s.lastCall)
	}
	it.s.mu.Unlock()
	it.t = it.s.clock.NewTimer(max(d, 0))
}

func (it *idleTimer) stop() {
	if it.t != nil {
		it.t.Stop()
		it.t = nil
	}
}

// suspendIfIdle takes g out of service when it has gone suspendAfterMs
// without a call and none is in flight, in one step with the check, so
// that no call reaches g afterwards: later calls find the wakeup and wait
// for it. It reports whether it did.
func (s *Supervisor) suspendIfIdle(g *generation) bool {
	after := time.Duration(s.suspendAfter.Load())
	s.mu.Lock()
	defer s.mu.Unlock()
	if after <= 0 || s.live != g || s.inflight > 0 || s.clock.Since(s.lastCall) < after {
		return false
	}
	s.live, s.wake = nil, newWakeup()
	return true
}

// finishWake ends the current sleep's wakeup, if any, releasing the calls
// that wait for it: with nil once the wake connected, or with why it
// failed. It reports how long the wake took, and whether it was requested.
func (s *Supervisor) finishWake(err error) (took time.Duration, requested bool) {
	s.mu.Lock()
	w := s.wake
	s.wake = nil
	s.mu.Unlock()
	if w == nil {
		return 0, false
	}
	w.finish(err)
	if !w.isRequested() {
		return 0, false
	}
	return time.Since(w.requestedAt), true
}

// wakeDuration is how long the current wake has taken so far (0 when none).
func (s *Supervisor) wakeDuration() time.Duration {
	s.mu.Lock()
	w := s.wake
	s.mu.Unlock()
	if w == nil || !w.isRequested() {
		return 0
	}
	return time.Since(w.requestedAt)
}

// WakeObserver is an Observer that also receives wakes: outcome is
// "success", "error" (the wake's connection failed: an outage begins) or
// "cancelled" (the supervisor was stopped first), and how long the wake
// took from the first call's request.
type WakeObserver interface {
	Wake(outcome string, d time.Duration)
}

// observeWake reports a finished wake to the observer, if it takes them.
func (s *Supervisor) observeWake(outcome string, d time.Duration) {
	if wo, ok := s.observer.(WakeObserver); ok {
		wo.Wake(outcome, d)
	}
}
