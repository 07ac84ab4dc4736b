package bridge

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// DefaultCloseBarrier is how long a generation may take to report closed
// before the supervisor refuses to start another.
// See docs/design.md, "Generations and the close barrier".
const DefaultCloseBarrier = 5 * time.Second

// Options build a Supervisor. The first group is the resource's own; the
// second is the manager's, the same for every supervisor (the controller's
// Supervisors fills it in). Policy and Egress are two different things:
// what the resource asks for, resolved from its spec, and which upstream
// addresses the operator lets any resource reach.
type Options struct {
	Namespace string
	Name      string
	// Policy is the resource's resolved spec.
	Policy *policy.Policy
	// BaseGeneration continues connection-generation numbering from a
	// previous supervisor of the same resource.
	BaseGeneration int64
	// Pod reaches a server whose policy has the Pod runtime: its Pod and
	// the tunnel's token. See docs/design.md, "The shim and the tunnel".
	Pod *PodTunnel
	Log logr.Logger
	// Observer receives call and sync measurements; nil discards them.
	Observer Observer

	// Registry is where the server's tools are published.
	Registry *registry.Registry
	// Egress decides which addresses a Streamable HTTP upstream may be
	// reached at; nil is egress.Default(), which refuses loopback,
	// link-local, unspecified and multicast addresses: a caller has to
	// allow them explicitly. It does not apply to the tunnel to a
	// Pod-runtime server's shim, whose address is the operator's own Pod's.
	// See docs/design.md, "Egress policy".
	Egress *egress.Policy
	// TracerProvider receives the supervisor's spans; nil is tracing off.
	// See docs/design.md, "Tracing".
	TracerProvider trace.TracerProvider
	// Clock times backoff, the stability window and the health checks; nil
	// is the real clock. The close barrier and the deadlines of requests
	// always run on real time.
	Clock clock.WithDelayedExecution
	// CloseBarrier defaults to DefaultCloseBarrier.
	CloseBarrier time.Duration
	// TerminateGrace is the stdio wait between stdin close, SIGTERM and
	// SIGKILL; it defaults to a third of CloseBarrier.
	TerminateGrace time.Duration
	// ResyncInterval is the least time between two list_changed re-syncs
	// of the server; zero is DefaultResyncInterval. See docs/design.md,
	// "Budgets".
	ResyncInterval time.Duration
	// OnChange, when set, is called whenever the snapshot changed, besides
	// the signal on Changes; it must not block. A set of supervisors tells
	// its reconciler through it without a goroutine per supervisor.
	OnChange func()
	// Shares is what the supervisors of each namespace share: the pace of
	// what their servers stream besides answers, and the budget of the bytes
	// being read from them. Nil gives this one a share of its own. See
	// docs/design.md, "Budgets".
	Shares *Shares

	dialer dialer      // tests inject transports here
	tls    *tls.Config // and trust their own HTTPS servers here
}

// Supervisor keeps one MCP server connected and its tools published.
type Supervisor struct {
	p        *policy.Policy
	ns       string
	owner    string
	registry *registry.Registry
	log      serverLog
	clock    clock.WithDelayedExecution
	barrier  time.Duration
	resync   time.Duration // least time between two re-syncs
	dialer   dialer
	changes  chan struct{}
	onChange func()     // Options.OnChange, or nil
	syncMu   sync.Mutex // two syncs of this server never interleave

	observer   Observer
	tracer     tracing.Tracer
	traceAttrs []attribute.KeyValue // what every span of this supervisor carries
	tasks      taskTools            // tools of the live generation that require tasks
	// filter is what of the server's tools is published: the policy's,
	// until SetToolFilter changes it in place.
	filter atomic.Pointer[policy.ToolFilter]

	mu     sync.Mutex
	snap   Snapshot
	live   *generation // the connected generation, nil while down
	last   *generation // the latest generation started, live or not
	events []Event
	// waitReport is the latest reason to wait for the Pod put into
	// snap.LastError; a connection clears it from there.
	waitReport *StageError

	// Idle servers (idle.go): calls in flight on the live generation, the
	// end of the last call (or the connection) on s.clock, and the wakeup
	// calls wait for while the server sleeps or wakes (nil otherwise).
	inflight int
	retired  bool // Retire: every new call refused before it is made
	lastCall time.Time
	wake     *wakeup
	// suspendAfter is spec.idle.suspendAfterMs, changed in place by
	// SetSuspendAfter, which kicks idleChanged.
	suspendAfter atomic.Int64
	idleChanged  chan struct{}
	// conflicted is kicked when a sync leaves the tool set in conflict:
	// serve then watches the registry for the holder's release, and only
	// then (a subscription per supervisor made every registry change wake
	// every supervisor of the fleet; docs/design.md, "Tool sync").
	conflicted chan struct{}
	// waking is set by the run goroutine, and read only by it, while the
	// attempt it runs is a wake.
	waking bool

	// share is the namespace's (Options.Shares), held until Closed, when
	// letGo lets it go.
	share *share
	letGo func()

	lifeMu sync.Mutex
	cancel context.CancelFunc // nil until Start (or Dispose)
	closed chan struct{}      // see Closed
}

// New builds a Supervisor; it does nothing until Start.
func New(o Options) *Supervisor {
	s := &Supervisor{
		p:        o.Policy,
		ns:       o.Namespace,
		owner:    o.Namespace + "/" + o.Name,
		registry: o.Registry,
		log:      serverLog{base: o.Log, mcpserver: o.Namespace + "/" + o.Name, serverName: o.Policy.ServerName},
		clock:    o.Clock,
		barrier:  o.CloseBarrier,
		resync:   cmp.Or(o.ResyncInterval, DefaultResyncInterval),
		dialer:   o.dialer,
		observer: o.Observer,
		changes:  make(chan struct{}, 1),
		onChange: o.OnChange,
		closed:   make(chan struct{}),

		idleChanged: make(chan struct{}, 1),
		conflicted:  make(chan struct{}, 1),
		snap:        Snapshot{Phase: v1alpha1.PhasePending, Reason: v1alpha1.ReasonConnecting, Generation: o.BaseGeneration, MaxAttempts: o.Policy.Reconnect.MaxAttempts},
	}
	if o.Policy.Stdio != nil {
		s.snap.Runtime = o.Policy.Stdio.Runtime
	}
	if s.tracer = tracing.New(o.TracerProvider); s.tracer.On() {
		s.traceAttrs = upstreamAttributes(o.Namespace, o.Name, o.Policy)
	}
	filter := o.Policy.Tools
	s.filter.Store(&filter)
	s.suspendAfter.Store(int64(o.Policy.SuspendAfter))
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.observer == nil {
		s.observer = nopObserver{}
	}
	if s.barrier <= 0 {
		s.barrier = DefaultCloseBarrier
	}
	s.share, s.letGo = o.Shares.hold(o.Namespace)
	if s.dialer == nil {
		s.dialer = s.newDialer(o)
	}
	return s
}

// newDialer is the transport of the policy: a child process (Local stdio),
// a tunnel to the server's Pod (Pod stdio), or Streamable HTTP.
func (s *Supervisor) newDialer(o Options) dialer {
	switch {
	case s.p.Stdio != nil && s.p.Stdio.Runtime == v1alpha1.RuntimePod:
		return &tunnelDialer{target: o.Pod, barrier: s.barrier, sniff: s.tasks.sniff, share: s.share}
	case s.p.Stdio != nil:
		grace := o.TerminateGrace
		if grace <= 0 {
			grace = s.barrier / 3
		}
		return &stdioDialer{spec: s.p.Stdio, log: s.log, grace: grace, sniff: s.tasks.sniff, share: s.share}
	}
	return &httpDialer{spec: s.p.HTTP, sniff: s.tasks.sniff, egress: cmp.Or(o.Egress, egress.Default()), namespace: o.Namespace, tracer: s.tracer, tls: o.tls, share: s.share}
}

// Start runs the supervisor until ctx ends or Dispose; a second Start, or a
// Start after Dispose, does nothing.
func (s *Supervisor) Start(ctx context.Context) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.cancel != nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.run(ctx)
}

// Dispose cancels a pending reconnect, aborts an in-flight connect, closes
// the live generation, waits for its close signal and unregisters the
// server's tools. It waits at most the close barrier: when the last
// generation has not closed by then (a child that outlives SIGTERM and
// SIGKILL's grace, a link that never reports closed) it returns an error
// that wraps ErrCloseTimeout, and Closed tells when it finally has. It
// returns early with ctx's error if ctx ends first. The tools leave the
// registry in every case.
// See docs/design.md, "Hot swap and disposal".
func (s *Supervisor) Dispose(ctx context.Context) error {
	s.lifeMu.Lock()
	if s.cancel == nil { // never started: nothing runs, and nothing will
		s.cancel = func() {}
		s.markClosed()
	}
	cancel := s.cancel
	s.lifeMu.Unlock()
	cancel()
	// The tools leave at once: a call that finds them while the live
	// generation closes would fail as "not connected", where one that
	// finds none waits for the server's next holder (docs/design.md,
	// "Replicas and ownership"). The Remove below catches a sync that
	// raced with the cancel.
	s.registry.Remove(s.ns, s.owner)
	// Real time, not s.clock: the barrier guards real processes.
	timer := time.NewTimer(s.barrier)
	defer timer.Stop()
	var err error
	select {
	case <-s.closed:
	case <-timer.C:
		err = fmt.Errorf("dispose %s: %w", s.owner, ErrCloseTimeout)
	case <-ctx.Done():
		err = fmt.Errorf("dispose %s: %w", s.owner, ctx.Err())
	}
	// Only here: a supervisor that stopped for good (ReconnectDisabled,
	// StartupFailed, CloseTimeout) keeps its last tools until disposed.
	// They must not outlive the resource, even while a generation closes.
	s.registry.Remove(s.ns, s.owner)
	if err == nil {
		s.update(func(sn *Snapshot) { sn.Tools = nil })
	}
	return err
}

// Closed is closed once the supervisor has stopped (disposed, or failed for
// good) and the last generation it started has closed, however long after
// the close barrier that was: from then on no process, request or goroutine
// of it remains, and another supervisor of the same server may start.
func (s *Supervisor) Closed() <-chan struct{} { return s.closed }

// CloseBarrier is how long the supervisor waits for a generation to close:
// Dispose takes at most about that long.
func (s *Supervisor) CloseBarrier() time.Duration { return s.barrier }

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
	kick(s.changes)
	if s.onChange != nil {
		s.onChange()
	}
}
