package bridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// generation is one MCP session over one freshly built transport.
type generation struct {
	num  int64
	ctx  context.Context // ends when the generation is being closed
	stop context.CancelFunc
	link link
	sess *mcp.ClientSession

	sessDone chan struct{} // closed when sess.Wait returned
	resync   chan struct{} // list_changed, coalesced
	retry    chan struct{} // publish a refused set again, coalesced
	probe    chan struct{} // a call saw a transport failure, coalesced
	wg       sync.WaitGroup

	lostOnce sync.Once
	lost     chan struct{}
	lostErr  *StageError
	lostAt   time.Time   // when serve saw the loss
	fetched  []*mcp.Tool // the latest complete fetch, for a retried swap
}

func newGeneration(num int64) *generation {
	ctx, stop := context.WithCancel(context.Background())
	return &generation{
		num: num, ctx: ctx, stop: stop,
		sessDone: make(chan struct{}),
		resync:   make(chan struct{}, 1),
		retry:    make(chan struct{}, 1),
		probe:    make(chan struct{}, 1),
		lost:     make(chan struct{}),
	}
}

// markLost reports the connection gone; only the first report counts, and
// none once the supervisor itself is closing the generation.
func (g *generation) markLost(err *StageError) {
	if g.ctx.Err() != nil {
		return
	}
	g.lostOnce.Do(func() {
		g.lostErr = err
		close(g.lost)
	})
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// go runs fn as one of the generation's goroutines, awaited on close.
func (g *generation) goFn(fn func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
}

// connect starts a generation and publishes its tools, all under one
// connectionTimeoutMs deadline (§4.3). On failure the generation is closed
// and its close barrier awaited before returning.
func (s *Supervisor) connect(ctx context.Context, everConnected bool) (*generation, error) {
	g := s.beginGeneration(everConnected)
	dctx, cancel := context.WithTimeout(ctx, s.p.ConnectionTimeout)
	defer cancel()
	stage := StageTransportStart
	err := s.open(dctx, g, &stage)
	if err == nil {
		stage = StageToolsList(1)
		err = s.syncTools(dctx, g, &stage)
	}
	if err != nil {
		err = s.attemptError(ctx, dctx, stage, err)
		s.log.Info("connection attempt failed", "generation", g.num, "error", err.Error())
		s.update(func(sn *Snapshot) { sn.LastError = err.(*StageError) })
		if cerr := s.closeGeneration(g); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	s.connected(g)
	return g, nil
}

// attemptError names the budget when the deadline, not the caller, ended it.
func (s *Supervisor) attemptError(ctx, dctx context.Context, stage string, err error) error {
	if ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
		err = errDeadline{budget: s.p.ConnectionTimeout}
	}
	var se *StageError
	if errors.As(err, &se) {
		return se
	}
	return &StageError{Stage: stage, Err: err}
}

func (s *Supervisor) beginGeneration(everConnected bool) *generation {
	s.tasks.reset()
	var num int64
	s.update(func(sn *Snapshot) {
		sn.Generation++
		num = sn.Generation
		if !everConnected {
			sn.Phase = PhaseConnecting
		} else {
			sn.Phase = PhaseReconnecting
		}
		sn.NextRetry, sn.RetryDelay = time.Time{}, 0
	})
	return newGeneration(num)
}

// open starts the transport and the MCP session.
func (s *Supervisor) open(ctx context.Context, g *generation, stage *string) error {
	l, err := s.dialer.dial(ctx, func(err error) { g.markLost(&StageError{Stage: StageConnection, Err: err}) })
	if err != nil {
		return err
	}
	g.link = l
	*stage = StageInitialize
	client := mcp.NewClient(clientImpl, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Never list from inside the handler: it runs on the reader.
			kick(g.resync)
		},
	})
	// The SDK's Connect closes its session when ctx ends, and closing can
	// wait on a hung server; closing the link first makes that immediate.
	stop := context.AfterFunc(ctx, l.close)
	sess, err := client.Connect(ctx, l.transport(), nil)
	stop()
	if err != nil {
		return err
	}
	g.sess = sess
	g.goFn(func() { s.watchSession(g) })
	if ex, ok := l.(interface{ exitError() error }); ok {
		g.goFn(func() { s.watchExit(g, ex) })
	}
	return nil
}

func (s *Supervisor) watchSession(g *generation) {
	err := g.sess.Wait()
	close(g.sessDone)
	if err == nil {
		err = errors.New("the server closed the connection")
	}
	g.markLost(&StageError{Stage: StageConnection, Err: fmt.Errorf("connection closed: %w", err)})
}

func (s *Supervisor) watchExit(g *generation, ex interface{ exitError() error }) {
	select {
	case <-g.link.closed():
		g.markLost(&StageError{Stage: StageConnection, Err: ex.exitError()})
	case <-g.ctx.Done():
	}
}

// connected makes g the live generation and starts its background work.
func (s *Supervisor) connected(g *generation) {
	init := g.sess.InitializeResult()
	info := &ServerInfo{ProtocolVersion: Truncate(init.ProtocolVersion, maxInfoLen)}
	if init.ServerInfo != nil {
		info.Name, info.Version = Truncate(init.ServerInfo.Name, maxInfoLen), Truncate(init.ServerInfo.Version, maxInfoLen)
	}
	s.mu.Lock()
	recovered := s.snap.Attempt > 0 || s.snap.Phase == PhaseReconnecting
	s.live = g
	s.snap.Phase, s.snap.ServerInfo = PhaseReady, info
	s.snap.LastConnected = s.clock.Now()
	s.snap.Attempt, s.snap.NextRetry, s.snap.RetryDelay = 0, time.Time{}, 0
	s.mu.Unlock()
	s.signal()
	tools := len(s.registry.Owned(s.ns, s.owner))
	s.log.Info("connected", "generation", g.num, "protocolVersion", info.ProtocolVersion,
		"tools", tools, "recovered", recovered)
	reason, verb := v1alpha1.ReasonConnected, "Connected to"
	if recovered {
		reason, verb = v1alpha1.ReasonRecovered, "Reconnected to"
	}
	s.emit(false, reason, fmt.Sprintf("%s %s %s (protocol %s) in generation %d; %d tools published",
		verb, cmp.Or(info.Name, "the server"), info.Version, info.ProtocolVersion, g.num, tools))
	g.goFn(func() { s.resyncLoop(g) })
	if s.p.HealthCheckInterval > 0 {
		g.goFn(func() { s.healthLoop(g) })
	} else {
		g.goFn(func() { s.probeOnDemand(g) })
	}
}

// serve waits until the live generation is lost or ctx ends, then closes it.
func (s *Supervisor) serve(ctx context.Context, g *generation, o *outage) error {
	sub := s.registry.Subscribe()
	defer sub.Close()
	stable := s.clock.After(s.p.Reconnect.MaxDelay)
	var lossErr error
	for lossErr == nil {
		select {
		case <-ctx.Done():
			_ = s.closeGeneration(g)
			return ctx.Err()
		case <-g.lost:
			lossErr = g.lostErr
			g.lostAt = s.clock.Now() // uptime ends here, not after the close
		case <-sub.C:
			changed := sub.Drain()
			if s.inConflict() && slices.Contains(changed, s.ns) {
				kick(g.retry) // the resync goroutine owns syncs; serve never waits on one
			}
		case <-stable:
			// Up for the stability window: the outage is over (§4.2).
			o.stable()
			s.clearAttempts()
		}
	}
	s.log.Info("connection lost", "generation", g.num, "error", lossErr.Error())
	s.update(func(sn *Snapshot) {
		// One step: no call may reach the lost session once the phase says so.
		if s.live == g {
			s.live = nil
		}
		sn.Phase, sn.LastError = PhaseReconnecting, g.lostErr
	})
	if err := s.closeGeneration(g); err != nil {
		return err
	}
	return lossErr
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
// close barrier. Calls in flight on g are cancelled first so that closing
// the session cannot wait on them.
func (s *Supervisor) closeGeneration(g *generation) error {
	s.mu.Lock()
	if s.live == g {
		s.live = nil
	}
	s.mu.Unlock()
	g.stop()
	closed := make(chan struct{})
	go func() {
		if g.sess != nil {
			_ = g.sess.Close()
			<-g.sessDone
		}
		if g.link != nil {
			<-g.link.closed()
		}
		g.wg.Wait()
		close(closed)
	}()
	if g.link != nil {
		g.link.close()
	}
	// Real time, not s.clock: the barrier guards real processes.
	timer := time.NewTimer(s.barrier)
	defer timer.Stop()
	select {
	case <-closed:
		return nil
	case <-timer.C:
		s.update(func(sn *Snapshot) {
			sn.LastError = &StageError{Stage: StageClose, Err: ErrCloseTimeout}
		})
		return ErrCloseTimeout
	}
}
