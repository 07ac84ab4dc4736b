package bridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// The connection state machine, in the order a generation lives through it:
// run → attempt → connect (open, first sync) → connected → serve → close.
// doc.go draws the map; this file is the only one that moves the phase.

// run is the supervisor's only long-lived goroutine: connect, serve until
// lost, back off, repeat, until the budget is spent or ctx ends.
func (s *Supervisor) run(ctx context.Context) {
	defer s.finish()
	o := outage{policy: s.p.Reconnect}
	everConnected := false
	for {
		connected, err := s.attempt(ctx, &o, everConnected)
		everConnected = everConnected || connected
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSuspended) {
			if !s.sleep(ctx) {
				return
			}
			continue // the wake is the next attempt, at once
		}
		if err != nil {
			s.stop(err)
			return
		}
		n, delay, ok := o.next()
		if !ok {
			s.registry.Remove(s.ns, s.owner)
			s.stop(&stopError{reason: v1alpha1.ReasonReconnectExhausted,
				msg: fmt.Sprintf("Gave up after %d consecutive failed attempts (reconnect.maxAttempts is %d); tools unregistered",
					o.failed, s.p.Reconnect.MaxAttempts)})
			return
		}
		s.scheduleRetry(n, delay, o.failed, everConnected)
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(delay):
		}
	}
}

// finish closes Closed once the last generation is down. A generation that
// outlived its close barrier keeps run waiting here, and the supervisor
// counts as closing, until it is.
func (s *Supervisor) finish() {
	if _, requested := s.finishWake(errStoppedAsleep); requested {
		s.observeWake("cancelled", 0)
	}
	s.mu.Lock()
	g := s.last
	s.mu.Unlock()
	if g != nil {
		<-g.shutdown() // already shut down on every path; shutdown is idempotent
	}
	s.markClosed()
}

// markClosed lets the namespace's share go, then closes Closed: once
// Dispose returns, the supervisor holds it no more.
func (s *Supervisor) markClosed() {
	s.letGo()
	close(s.closed)
}

// stopError ends the supervisor in phase Failed with a reason.
type stopError struct {
	reason string
	msg    string
}

func (e *stopError) Error() string { return e.msg }

// attempt runs one generation from connect to loss; connected reports
// that it became live. A nil error means "back off and try again"; a
// *stopError means stop for good.
func (s *Supervisor) attempt(ctx context.Context, o *outage, everConnected bool) (connected bool, err error) {
	g, err := s.connectApart(ctx, everConnected)
	s.wakeAnswered(ctx, err)
	switch {
	case ctx.Err() != nil:
		if g != nil { // connected just as the supervisor was disposed
			_ = s.closeGeneration(g)
		}
		return g != nil, nil
	case errors.Is(err, ErrCloseTimeout):
		return false, s.closeTimeout("previous")
	case err != nil:
		return false, s.attemptFailed(o, everConnected, err)
	}
	return true, s.served(ctx, g, o)
}

// connectApart connects on a goroutine that ends with the connect, and
// waits for it. A connect is the deepest work a supervisor does (the
// handshake, decoding every tool), and run would keep the stack it grew for
// as long as the server is served: the runtime shrinks a stack by at most
// half per collection, and an idle fleet is seldom collected. See
// docs/design.md, "Replicas and ownership" (memory).
func (s *Supervisor) connectApart(ctx context.Context, everConnected bool) (*generation, error) {
	type connected struct {
		g   *generation
		err error
	}
	done := make(chan connected, 1)
	go func() {
		g, err := s.tracedConnect(ctx, everConnected)
		done <- connected{g, err}
	}()
	c := <-done
	return c.g, c.err
}

// attemptFailed counts a failed attempt, and stops the supervisor when
// no retry may follow it.
func (s *Supervisor) attemptFailed(o *outage, everConnected bool, err error) error {
	o.failedAttempt()
	s.update(func(sn *Snapshot) { sn.FailedAttempts = o.failed })
	if !everConnected && s.p.FailOnStartupError {
		return &stopError{reason: v1alpha1.ReasonStartupFailed, msg: "The first connection attempt failed and failOnStartupError is set: " + err.Error()}
	}
	if !s.p.Reconnect.Enabled {
		return &stopError{reason: v1alpha1.ReasonReconnectDisabled, msg: "The connection failed and reconnect is disabled: " + err.Error()}
	}
	return nil
}

// served serves the live generation g until it ends and counts its end
// against the outage: errSuspended for a sleep, a *stopError when the loss
// is final, nil to reconnect.
func (s *Supervisor) served(ctx context.Context, g *generation, o *outage) error {
	up := s.clock.Now()
	lossErr := s.serve(ctx, g, o, up)
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(lossErr, errSuspended) {
		o.upFor(s.clock.Since(up)) // a sleep is no loss: no attempt counted
		return lossErr
	}
	if !o.upFor(g.lostAt.Sub(up)) {
		o.failedAttempt() // lost inside the stability window: the outage goes on
	}
	s.update(func(sn *Snapshot) { sn.FailedAttempts = o.failed })
	if errors.Is(lossErr, ErrCloseTimeout) {
		return s.closeTimeout("lost")
	}
	if !s.p.Reconnect.Enabled {
		return lostForGood(lossErr)
	}
	return nil
}

// lostForGood is the end of a supervisor whose connection was lost with
// reconnect disabled.
func lostForGood(lossErr error) *stopError {
	return &stopError{reason: v1alpha1.ReasonReconnectDisabled,
		msg: "The connection was lost and reconnect is disabled; its tools stay registered but fail: " + lossErr.Error()}
}

func (s *Supervisor) closeTimeout(which string) *stopError {
	return &stopError{reason: v1alpha1.ReasonCloseTimeout, msg: "The " + which + " connection did not close within " +
		s.barrier.String() + "; reconnecting was stopped to avoid two live server processes"}
}

// stop records a final failure; the tools stay as the caller left them.
func (s *Supervisor) stop(err error) {
	var se *stopError
	if !errors.As(err, &se) {
		se = &stopError{reason: v1alpha1.ReasonReconnectExhausted, msg: err.Error()}
	}
	s.log.Error(nil, "connection supervisor stopped", "reason", se.reason, "message", se.msg)
	s.finishWake(err) // a suspend whose close passed the barrier
	s.emit(true, se.reason, se.msg)
	s.update(func(sn *Snapshot) {
		sn.Phase, sn.Reason, sn.Message = v1alpha1.PhaseFailed, se.reason, se.msg
		sn.NextRetry, sn.RetryDelay, sn.Attempt = time.Time{}, 0, 0
		sn.Tools = s.registry.Owned(s.ns, s.owner)
	})
}

func (s *Supervisor) scheduleRetry(n int, delay time.Duration, failed int, everConnected bool) {
	s.log.Info("reconnecting", "attempt", n, "maxAttempts", s.p.Reconnect.MaxAttempts, "delay", delay.String())
	s.emit(true, v1alpha1.ReasonReconnecting, fmt.Sprintf("Reconnecting in %dms (attempt %d/%d)%s",
		delay.Milliseconds(), n, s.p.Reconnect.MaxAttempts, s.lastErrorSuffix()))
	s.update(func(sn *Snapshot) {
		sn.Phase, sn.Reason = v1alpha1.PhaseReconnecting, v1alpha1.ReasonReconnecting
		if !everConnected {
			sn.Phase, sn.Reason = v1alpha1.PhaseConnecting, v1alpha1.ReasonConnecting
		}
		sn.Attempt, sn.RetryDelay, sn.FailedAttempts = n, delay, failed
		sn.NextRetry = s.clock.Now().Add(delay)
	})
}

// lastErrorSuffix is ": <last error>" for event messages, or nothing.
func (s *Supervisor) lastErrorSuffix() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap.LastError == nil {
		return ""
	}
	return ": " + s.snap.LastError.Error()
}

// connect starts a generation and publishes its tools, all under one
// connectionTimeoutMs deadline. On failure the generation is closed and
// its close barrier awaited before returning.
// See docs/design.md, "The connection budget".
func (s *Supervisor) connect(ctx context.Context, everConnected bool) (*generation, error) {
	g := s.beginGeneration(everConnected)
	se := s.awaitServer(ctx)
	if se == nil {
		se = s.openAndSync(ctx, g)
	}
	if se != nil {
		s.log.Info("connection attempt failed", "generation", g.num, "error", se.Error())
		s.update(func(sn *Snapshot) { sn.LastError = se })
		if cerr := s.closeGeneration(g); cerr != nil {
			return nil, cerr
		}
		return nil, se
	}
	s.connected(g)
	return g, nil
}

// openAndSync opens the generation and fetches and publishes its tools
// under one connectionTimeoutMs deadline.
func (s *Supervisor) openAndSync(ctx context.Context, g *generation) *StageError {
	dctx, cancel := context.WithTimeout(ctx, s.p.ConnectionTimeout)
	defer cancel()
	stage, err := s.open(dctx, g)
	if err == nil {
		stage, err = s.syncTools(dctx, g)
	}
	if err != nil {
		return s.attemptError(ctx, dctx, stage, err)
	}
	return nil
}

// awaitServer waits until the server can be dialled at all (a Pod-runtime
// server's Pod is Ready), before the connection budget starts. Waiting is
// not an attempt: the phase stays what beginGeneration set, and every new
// reason to wait goes into the snapshot as lastError, stage pod. The wait
// has a connectionTimeoutMs bound of its own; when that runs out the
// attempt fails, and counts, like any other.
// See docs/design.md, "Pods that are not there yet".
func (s *Supervisor) awaitServer(ctx context.Context) *StageError {
	a, ok := s.dialer.(awaiter)
	if !ok {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.p.ConnectionTimeout)
	defer cancel()
	err := a.await(wctx, s.waiting)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		err = errPodDeadline{budget: s.p.ConnectionTimeout, reason: err.Error()}
	}
	return newStageError(StagePod, err)
}

// waiting records why the supervisor waits for its server's Pod.
func (s *Supervisor) waiting(w PodWait) {
	s.log.Info("waiting for the server's Pod", "pod", w.Pod, "reason", w.Reason)
	report := newStageError(StagePod, errors.New(w.Reason))
	s.update(func(sn *Snapshot) {
		sn.PodName, sn.LastError = w.Pod, report
		s.waitReport = report
	})
}

// attemptError names the budget when the deadline, not the caller, ended it.
func (s *Supervisor) attemptError(ctx, dctx context.Context, stage string, err error) *StageError {
	if ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
		err = errDeadline{budget: s.p.ConnectionTimeout}
	}
	var se *StageError
	if errors.As(err, &se) {
		return se
	}
	return newStageError(stage, err)
}

func (s *Supervisor) beginGeneration(everConnected bool) *generation {
	s.tasks.reset()
	var g *generation
	s.update(func(sn *Snapshot) {
		sn.Generation++
		g = newGeneration(sn.Generation)
		g.opening = true
		s.last = g
		if !everConnected || s.waking {
			sn.Phase, sn.Reason = v1alpha1.PhaseConnecting, v1alpha1.ReasonConnecting
		} else {
			sn.Phase, sn.Reason = v1alpha1.PhaseReconnecting, v1alpha1.ReasonReconnecting
		}
		sn.NextRetry, sn.RetryDelay = time.Time{}, 0
	})
	return g
}

// open starts the transport and the MCP session, and the goroutines that
// watch them for a loss; a failure comes with the stage it failed in.
func (s *Supervisor) open(ctx context.Context, g *generation) (stage string, err error) {
	l, err := s.dialer.dial(ctx, func(err error) { g.lose(StageConnection, err) })
	if err != nil {
		return StageTransportStart, err
	}
	g.link = l
	// The SDK's Connect closes its session when ctx ends, and closing can
	// wait on a hung server; closing the link first makes that immediate.
	stop := context.AfterFunc(ctx, l.close)
	se := &sessionEnd{g: g, ready: make(chan struct{})}
	sess, err := sdkClient.Connect(withSessionEnd(ctx, se), l.transport(), nil)
	stop()
	if err != nil {
		se.connected()
		return StageInitialize, exitedInstead(ctx, l, startError(l, err))
	}
	g.sess = sess
	listening.Store(sess, g)
	se.connected()
	if _, ok := l.(exitReporter); ok {
		g.goFn(g.watch)
	}
	if err := checkInitialize(sess.InitializeResult()); err != nil {
		return StageInitialize, err // the generation's close ends the session
	}
	return "", nil
}

// maxInitializeBytes bounds the answer to initialize (or server/discover)
// that a session keeps for its whole life: the SDK holds it, instructions
// and all, and a message may be 16 MiB (docs/design.md, "Budgets").
const maxInitializeBytes = 1 << 20

// checkInitialize refuses a session whose server's initialize answer is
// larger than maxInitializeBytes as JSON.
func checkInitialize(res *mcp.InitializeResult) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("the server's initialize answer cannot be encoded as JSON: %w", err)
	}
	if len(b) > maxInitializeBytes {
		return fmt.Errorf("the server's initialize answer is %d bytes of JSON, over the %d MiB a connection keeps", len(b), maxInitializeBytes>>20)
	}
	return nil
}

// exitedInstead explains a failed handshake by the server's exit: "exit
// status 1" says more than the EOF or the broken pipe that the session saw
// first. The exit is waited for briefly, and not once ctx has ended (the
// budget's deadline names the failure then).
func exitedInstead(ctx context.Context, l link, err error) error {
	ex, ok := l.(exitReporter)
	if !ok || ctx.Err() != nil {
		return err
	}
	timer := time.NewTimer(exitExplains)
	defer timer.Stop()
	select {
	case <-l.closed():
		return ex.exitError()
	case <-timer.C:
	case <-ctx.Done():
	}
	return err
}

// exitExplains bounds the wait for a server's exit after a failed handshake.
const exitExplains = 200 * time.Millisecond

// connected makes g the live generation and starts its background work.
func (s *Supervisor) connected(g *generation) {
	init := g.sess.InitializeResult()
	info := &ServerInfo{ProtocolVersion: Truncate(init.ProtocolVersion, maxInfoLen)}
	if init.ServerInfo != nil {
		info.Name, info.Version = Truncate(init.ServerInfo.Name, maxInfoLen), Truncate(init.ServerInfo.Version, maxInfoLen)
	}
	s.mu.Lock()
	recovered := s.snap.Attempt > 0 || s.snap.Phase == v1alpha1.PhaseReconnecting
	s.live, g.opening = g, false
	s.snap.Phase, s.snap.Reason, s.snap.ServerInfo = v1alpha1.PhaseReady, v1alpha1.ReasonConnected, info
	if pl, ok := g.link.(podLink); ok {
		s.snap.PodName = pl.podName()
	}
	if s.snap.LastError != nil && s.snap.LastError == s.waitReport {
		s.snap.LastError = nil // a reason to wait, not an error, and over now
	}
	s.snap.LastConnected = s.clock.Now()
	s.lastCall = s.snap.LastConnected // the idle time starts with the connection
	s.snap.Attempt, s.snap.NextRetry, s.snap.RetryDelay = 0, time.Time{}, 0
	s.mu.Unlock()
	s.signal()
	tools := len(s.registry.Owned(s.ns, s.owner))
	s.log.Info("connected", "generation", g.num, "protocolVersion", info.ProtocolVersion,
		"tools", tools, "recovered", recovered, "woken", s.waking)
	reason, verb := v1alpha1.ReasonConnected, "Connected to"
	switch {
	case s.waking:
		reason, verb = v1alpha1.ReasonWoken, fmt.Sprintf("Woke for a tool call in %dms: connected to", s.wakeDuration().Milliseconds())
	case recovered:
		reason, verb = v1alpha1.ReasonRecovered, "Reconnected to"
	}
	s.emit(false, reason, fmt.Sprintf("%s %s %s (protocol %s) in generation %d; %d tools published",
		verb, cmp.Or(info.Name, "the server"), info.Version, info.ProtocolVersion, g.num, tools))
	g.startSyncing(func() { s.resyncLoop(g) })
	g.startHealth(s.clock, s.p.HealthCheckInterval)
}

// serve waits until the live generation is lost, goes idle, or ctx ends,
// then closes it. It owns the stability window (a connection up since up
// for the whole window ends the outage while it is still up) and the idle
// timer (suspendAfterMs without a call suspends the server: errSuspended).
func (s *Supervisor) serve(ctx context.Context, g *generation, o *outage, up time.Time) error {
	var conflict conflictWatch
	defer conflict.stop()
	stable := s.clock.After(s.p.Reconnect.MaxDelay)
	idle := &idleTimer{s: s}
	idle.rearm()
	defer idle.stop()
	var lossErr error
	for lossErr == nil {
		select {
		case <-ctx.Done():
			_ = s.closeGeneration(g)
			return ctx.Err()
		case <-idle.C():
			if s.suspendIfIdle(g) {
				return s.suspend(g)
			}
			idle.rearm()
		case <-s.idleChanged:
			idle.rearm()
		case <-g.lost:
			lossErr = g.lostErr
			g.lostAt = s.clock.Now() // uptime ends here, not after the close
		case <-s.conflicted:
			if conflict.start(s) {
				g.wake(g.retry) // a release may have come before the watch: look once
			}
		case <-conflict.c():
			if conflict.changed(s) {
				g.wake(g.retry) // the syncer owns syncs; serve never waits on one
			}
		case <-stable:
			if o.upFor(s.clock.Since(up)) {
				s.clearAttempts()
			}
		}
	}
	s.log.Info("connection lost", "generation", g.num, "error", lossErr.Error())
	s.update(func(sn *Snapshot) {
		// One step: no call may reach the lost session once the phase says so.
		if s.live == g {
			s.live = nil
		}
		sn.LastError = g.lostErr
		if s.p.Reconnect.Enabled {
			sn.Phase, sn.Reason = v1alpha1.PhaseReconnecting, v1alpha1.ReasonReconnecting
			return
		}
		// Final at once, also while g closes: never a Reconnecting that
		// does not reconnect. stop repeats it, or says CloseTimeout.
		final := lostForGood(lossErr)
		sn.Phase, sn.Reason, sn.Message = v1alpha1.PhaseFailed, final.reason, final.msg
	})
	if err := s.closeGeneration(g); err != nil {
		return err
	}
	return lossErr
}

// errSuspended ends serve when the server goes to sleep: no loss.
var errSuspended = errors.New("suspended after spec.idle.suspendAfterMs without a tool call")

// suspend closes g, which suspendIfIdle took out of service, for a sleep.
// The phase turns Idle (sleep) only once g has closed: for a Pod-runtime
// server, the Deployment goes to 0 replicas after the shim confirmed the
// child's reap.
func (s *Supervisor) suspend(g *generation) error {
	s.log.Info("suspending: no tool call for spec.idle.suspendAfterMs", "generation", g.num,
		"suspendAfter", time.Duration(s.suspendAfter.Load()).String())
	if err := s.closeGeneration(g); err != nil {
		return err
	}
	return errSuspended
}

// sleep is the Idle phase: the tools stay published, nothing runs, no
// health check, until a call requests the wake (true: connect now) or ctx
// ends (false). A call that came while the connection closed wakes it at
// once.
// See docs/design.md, "Idle servers".
func (s *Supervisor) sleep(ctx context.Context) bool {
	s.mu.Lock()
	w := s.wake
	s.mu.Unlock()
	if w == nil { // suspendIfIdle always leaves one; never sleep without it
		return ctx.Err() == nil
	}
	tools := len(s.registry.Owned(s.ns, s.owner))
	s.emit(false, v1alpha1.ReasonSuspended, fmt.Sprintf(
		"Suspended after %dms without a tool call; %d tools stay published and the next tool call wakes the server",
		time.Duration(s.suspendAfter.Load()).Milliseconds(), tools))
	s.update(func(sn *Snapshot) {
		sn.Phase, sn.Reason, sn.PodName = v1alpha1.PhaseIdle, v1alpha1.ReasonIdle, ""
		sn.Attempt, sn.NextRetry, sn.RetryDelay = 0, time.Time{}, 0
	})
	select {
	case <-ctx.Done():
		return false
	case <-w.requested:
	}
	s.waking = true
	return true
}

// wakeAnswered ends a wake with its connection attempt's result: the
// waiting calls proceed on the new generation, or fail with why the wake
// failed (an ordinary outage follows).
func (s *Supervisor) wakeAnswered(ctx context.Context, err error) {
	if !s.waking {
		return
	}
	s.waking = false
	outcome := "success"
	switch {
	case ctx.Err() != nil:
		err, outcome = errStoppedAsleep, "cancelled"
	case err != nil:
		outcome = "error"
		s.log.Info("the wake failed", "error", boundError(err).Error())
	}
	took, _ := s.finishWake(err)
	s.observeWake(outcome, took)
}

// inConflict: the last publish was refused. Every registry change wakes
// every supervisor, so this must not copy the snapshot.
func (s *Supervisor) inConflict() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.SyncConflict != ""
}

// clearAttempts ends the outage in the snapshot; a connection that never
// failed changes nothing and costs its resource no reconcile.
func (s *Supervisor) clearAttempts() {
	s.mu.Lock()
	changed := s.snap.FailedAttempts != 0 || s.snap.Attempt != 0
	s.snap.FailedAttempts, s.snap.Attempt = 0, 0
	s.mu.Unlock()
	if changed {
		s.signal()
	}
}

// closeGeneration closes g and waits for its close signal, at most the
// close barrier. See docs/design.md, "Generations and the close barrier".
func (s *Supervisor) closeGeneration(g *generation) error {
	s.mu.Lock()
	if s.live == g {
		s.live = nil
	}
	s.mu.Unlock()
	down := g.shutdown()
	// Real time, not s.clock: the barrier guards real processes.
	timer := time.NewTimer(s.barrier)
	defer timer.Stop()
	select {
	case <-down:
		return nil
	case <-timer.C:
		s.update(func(sn *Snapshot) {
			sn.LastError = newStageError(StageClose, ErrCloseTimeout)
		})
		return ErrCloseTimeout
	}
}

// conflictWatch is serve's registry subscription while the supervisor's
// tool set is in conflict, so that the holder's release is retried at once.
type conflictWatch struct{ sub *registry.Subscription }

// start subscribes, if the tool set is in conflict and not yet watched,
// and reports whether it did.
func (w *conflictWatch) start(s *Supervisor) bool {
	if w.sub != nil || !s.inConflict() {
		return false
	}
	w.sub = s.registry.Subscribe()
	return true
}

// c is the subscription's signal, nil (never ready) while not watching.
func (w *conflictWatch) c() <-chan struct{} {
	if w.sub == nil {
		return nil
	}
	return w.sub.C
}

// changed reports whether the namespace changed while the tool set is in
// conflict; a tool set no longer in conflict ends the watch.
func (w *conflictWatch) changed(s *Supervisor) bool {
	changed := w.sub.Drain()
	if !s.inConflict() {
		w.stop()
		return false
	}
	return slices.Contains(changed, s.ns)
}

func (w *conflictWatch) stop() {
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
