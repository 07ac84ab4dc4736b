package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/mcpbridge/operator/internal/policy"
)

// Phase is the supervisor's connection state.
type Phase string

const (
	PhasePending      Phase = "Pending"
	PhaseConnecting   Phase = "Connecting"
	PhaseReady        Phase = "Ready"
	PhaseReconnecting Phase = "Reconnecting"
	PhaseFailed       Phase = "Failed"
)

// DefaultCloseBarrier is how long a generation may take to report closed
// before the supervisor refuses to start another (§4.1).
const DefaultCloseBarrier = 5 * time.Second

// Options build a Supervisor.
type Options struct {
	Namespace string
	Name      string
	Policy    *policy.Policy
	Registry  *Registry
	Log       logr.Logger
	// BaseGeneration continues connection-generation numbering from a
	// previous supervisor of the same resource.
	BaseGeneration int64
	// Clock times backoff and the stability window; nil is the real clock.
	Clock clock.Clock
	// CloseBarrier defaults to DefaultCloseBarrier.
	CloseBarrier time.Duration
	// Observer receives call and sync measurements; nil discards them.
	Observer Observer
	// TerminateGrace is the stdio wait between stdin close, SIGTERM and
	// SIGKILL; it defaults to a third of CloseBarrier.
	TerminateGrace time.Duration

	dialer dialer // tests inject transports here
}

// Supervisor keeps one MCP server connected and its tools published.
type Supervisor struct {
	p        *policy.Policy
	ns       string
	owner    string
	registry *Registry
	log      logr.Logger
	clock    clock.Clock
	barrier  time.Duration
	dialer   dialer
	changes  chan struct{}
	syncMu   sync.Mutex // two syncs of this server never interleave

	observer Observer
	tasks    taskTools // tools of the live generation that require tasks

	mu     sync.Mutex
	snap   Snapshot
	live   *generation // the connected generation, nil while down
	events []Event

	lifeMu sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New builds a Supervisor; it does nothing until Start.
func New(o Options) *Supervisor {
	s := &Supervisor{
		p:        o.Policy,
		ns:       o.Namespace,
		owner:    o.Namespace + "/" + o.Name,
		registry: o.Registry,
		log:      o.Log.WithValues("mcpserver", o.Namespace+"/"+o.Name, "serverName", o.Policy.ServerName),
		clock:    o.Clock,
		barrier:  o.CloseBarrier,
		dialer:   o.dialer,
		observer: o.Observer,
		changes:  make(chan struct{}, 1),
		snap:     Snapshot{Phase: PhasePending, Generation: o.BaseGeneration, MaxAttempts: o.Policy.Reconnect.MaxAttempts},
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.observer == nil {
		s.observer = nopObserver{}
	}
	if s.barrier <= 0 {
		s.barrier = DefaultCloseBarrier
	}
	if s.dialer == nil {
		grace := o.TerminateGrace
		if grace <= 0 {
			grace = s.barrier / 3
		}
		s.dialer = newDialer(o.Policy, s.log, grace, s.tasks.sniff)
	}
	return s
}

func newDialer(p *policy.Policy, log logr.Logger, grace time.Duration, sniff func([]byte)) dialer {
	if p.Stdio != nil {
		return &stdioDialer{spec: p.Stdio, log: log, grace: grace, sniff: sniff}
	}
	return &httpDialer{spec: p.HTTP, sniff: sniff}
}

// Start runs the supervisor until ctx ends or Dispose; a second Start does
// nothing.
func (s *Supervisor) Start(ctx context.Context) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.done != nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go s.run(ctx)
}

// Dispose cancels a pending reconnect, aborts an in-flight connect, closes
// the live generation, waits for its close barrier and unregisters the
// server's tools. It returns early with ctx's error if ctx ends first.
func (s *Supervisor) Dispose(ctx context.Context) error {
	s.lifeMu.Lock()
	cancel, done := s.cancel, s.done
	s.lifeMu.Unlock()
	if done != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			// Its tools must not outlive the resource, even if the
			// generation is still closing.
			s.registry.Remove(s.ns, s.owner)
			return fmt.Errorf("dispose %s: %w", s.owner, ctx.Err())
		}
	}
	// Only here: a supervisor that stopped for good (ReconnectDisabled,
	// StartupFailed, CloseTimeout) keeps its last tools until disposed.
	s.registry.Remove(s.ns, s.owner)
	s.update(func(sn *Snapshot) { sn.Tools = nil })
	return nil
}

// Changes receives a value whenever the snapshot changed since the last
// receive; sends never block and coalesce.
func (s *Supervisor) Changes() <-chan struct{} { return s.changes }

// Snapshot is a copy of the supervisor's current state.
func (s *Supervisor) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.clone()
}

// update changes the snapshot under the lock and signals a change.
func (s *Supervisor) update(fn func(*Snapshot)) {
	s.mu.Lock()
	fn(&s.snap)
	s.mu.Unlock()
	s.signal()
}

func (s *Supervisor) signal() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}
