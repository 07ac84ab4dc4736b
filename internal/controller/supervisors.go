package controller

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
)

// shutdownTimeout bounds disposing every supervisor when the manager stops
// (graceful shutdown within 30 s).
// See docs/design.md, "Operations".
const shutdownTimeout = 25 * time.Second

// The egress policy's in-cluster rule looks up the owner of an upstream
// address among all Pods and Services (egress.KubeOwners).
// +kubebuilder:rbac:groups="",resources=pods;services,verbs=list

// Supervisors runs one bridge.Supervisor per McpServer, keyed by name. It is
// a manager.Runnable that runs on every replica, leader or not: each runs
// the supervisors (and child processes) of the servers it owns, and all are
// disposed when the manager stops. Supervisors never write to the apiserver; their change
// signals reach the reconciler through Source. Build it with NewSupervisors.
type Supervisors struct {
	SupervisorsOptions

	// shares are what the supervisors of each namespace share (bridge.Shares).
	shares *bridge.Shares

	mu       sync.Mutex
	ctx      context.Context // of the supervisors: ends only with their disposal
	mgrCtx   context.Context // the manager's
	entries  map[types.NamespacedName]*supervisorEntry
	started  chan struct{}
	disposed chan struct{}
	events   chan event.TypedGenericEvent[*v1alpha1.McpServer]

	// changed are the servers whose supervisor changed since forward last
	// looked; wake kicks forward. One goroutine serves every supervisor
	// (docs/design.md, "Replicas and ownership": memory).
	changedMu sync.Mutex
	changed   map[types.NamespacedName]struct{}
	wake      chan struct{}
}

// SupervisorsOptions are what every supervisor of a manager shares.
type SupervisorsOptions struct {
	Registry *registry.Registry
	Log      logr.Logger
	// Egress is the egress policy of every supervisor's HTTP upstreams; nil
	// is egress.Default(). See docs/design.md, "Egress policy".
	Egress *egress.Policy
	// TracerProvider receives every supervisor's spans; nil is tracing off.
	TracerProvider trace.TracerProvider
	// Tune lets tests shorten the close barrier and grace periods.
	Tune func(*bridge.Options)
	// DrainAfter are waited for (at most DrainTimeout in all) once the
	// manager stops, before the supervisors are disposed: the gateway's
	// Drained and the replicas' endpoint's end, so that the calls they
	// still take are answered.
	DrainAfter []<-chan struct{}
	// DrainTimeout bounds each wait for calls in flight (a stopping
	// manager's, a server handed over); 0 is 10 s.
	DrainTimeout time.Duration
}

// NewSupervisors returns an empty set of supervisors; Start runs it.
func NewSupervisors(o SupervisorsOptions) *Supervisors {
	o.DrainTimeout = cmp.Or(o.DrainTimeout, drainTimeout)
	return &Supervisors{
		SupervisorsOptions: o,
		shares:             bridge.NewShares(),
		entries:            map[types.NamespacedName]*supervisorEntry{},
		started:            make(chan struct{}),
		disposed:           make(chan struct{}),
		events:             make(chan event.TypedGenericEvent[*v1alpha1.McpServer], 1024),
		changed:            map[types.NamespacedName]struct{}{},
		wake:               make(chan struct{}, 1),
	}
}

// SwapKey is what a supervisor runs: Ensure compares it to decide between
// keeping the supervisor, changing its tool filter in place, and a hot swap.
// See docs/design.md, "Hot swap and disposal".
type SwapKey struct {
	// Connection changes when the connection has to be rebuilt: a new
	// restartedAt, a changed resolved value, or any other change of the
	// policy than spec.tools.
	Connection string
	// Generation is the resource's metadata.generation.
	Generation int64
	// Tools is the resolved spec.tools.
	Tools policy.ToolFilter
	// SuspendAfter is the resolved spec.idle.suspendAfterMs.
	SuspendAfter time.Duration
}

func (k SwapKey) equal(o SwapKey) bool {
	return k.Connection == o.Connection && k.Generation == o.Generation && k.Tools.Equal(o.Tools) &&
		k.SuspendAfter == o.SuspendAfter
}

// inPlace: specKey differs from k only in what a running supervisor
// changes in place (the tool filter, suspendAfterMs), and in the spec
// generation that this change made.
func (k SwapKey) inPlace(specKey SwapKey) bool {
	return k.Connection == specKey.Connection && (!k.Tools.Equal(specKey.Tools) || k.SuspendAfter != specKey.SuspendAfter)
}

type supervisorEntry struct {
	sup     *bridge.Supervisor
	key     SwapKey // what the supervisor runs; see Ensure
	cancel  context.CancelFunc
	started time.Time

	// Stopping: the first Stop disposes, concurrent ones wait for it.
	stopOnce sync.Once
	stopping atomic.Bool
	// stillClosing is what Stop returns while the supervisor's last
	// generation outlives its close barrier; the entry stays until it has
	// closed, so that no new supervisor of the same resource starts a second
	// server process meanwhile.
	stillClosing error
}

// Source feeds supervisor changes to the reconciler.
func (s *Supervisors) Source() source.Source {
	return source.Channel(s.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.McpServer]{})
}

// NeedLeaderElection is false: no part of the data plane waits for a
// leader (docs/design.md, "Replicas and ownership").
func (s *Supervisors) NeedLeaderElection() bool { return false }

// Start records the manager's context and, when it ends, lets the calls in
// flight finish (at most DrainTimeout), then disposes every supervisor so
// that no child process outlives the manager, and closes Disposed.
func (s *Supervisors) Start(ctx context.Context) error {
	s.mu.Lock()
	// The supervisors outlive the manager's context until they are
	// disposed here: calls keep being answered while the gateway drains.
	s.ctx, s.mgrCtx = context.WithoutCancel(ctx), ctx
	s.mu.Unlock()
	close(s.started)
	s.forward(ctx)
	limit := time.After(s.DrainTimeout)
	for _, ch := range s.DrainAfter {
		select {
		case <-ch:
		case <-limit:
		}
	}
	s.drain(s.DrainTimeout)
	s.DisposeAll()
	close(s.disposed)
	return nil
}

// Disposed is closed once Start has disposed every supervisor.
func (s *Supervisors) Disposed() <-chan struct{} { return s.disposed }

// drainTimeout is the default DrainTimeout: how long a stopping manager
// waits for the calls in flight before it disposes the supervisors
// (docs/design.md, "Replicas and ownership": shutdown).
const drainTimeout = 10 * time.Second

// StopWhenIdle is Stop once key's supervisor answers no call, or after
// at most DrainTimeout: a server handed over to another replica finishes
// the calls it had begun. It is retired first: a call that reaches it
// after that is refused before it is made, and its route sends it to the
// new holder.
func (s *Supervisors) StopWhenIdle(ctx context.Context, key types.NamespacedName) error {
	sup := s.Get(key)
	if sup != nil {
		sup.Retire()
		if err := waitIdle(ctx, s.DrainTimeout, sup.InFlight); err != nil {
			sup.Unretire() // not stopped: a later reconcile may keep it
			return err
		}
	}
	return s.Stop(ctx, key)
}

// drain waits until no supervisor answers a call, at most d.
func (s *Supervisors) drain(d time.Duration) {
	_ = waitIdle(context.Background(), d, s.inFlight) // the manager's context has ended
}

// waitIdle waits until inFlight counts no call, at most d; it returns
// ctx's error if ctx ends first.
func waitIdle(ctx context.Context, d time.Duration, inFlight func() int) error {
	deadline := time.Now().Add(d)
	for inFlight() > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (s *Supervisors) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.entries {
		n += e.sup.InFlight()
	}
	return n
}

// Get returns the supervisor running for key, if any; not one being
// disposed.
func (s *Supervisors) Get(key types.NamespacedName) *bridge.Supervisor {
	if e := s.running(key); e != nil {
		return e.sup
	}
	return nil
}

// Age is how long key has had a supervisor here, across swaps: since this
// replica last started one for it where none was; false when none runs.
func (s *Supervisors) Age(key types.NamespacedName) (time.Duration, bool) {
	if e := s.running(key); e != nil {
		return time.Since(e.started), true
	}
	return 0, false
}

// running is key's entry unless it has none or is being disposed.
func (s *Supervisors) running(key types.NamespacedName) *supervisorEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil && !e.stopping.Load() {
		return e
	}
	return nil
}

// Present reports whether key has a supervisor, running or still closing:
// while it has, no other replica may start the server's child.
func (s *Supervisors) Present(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[key] != nil
}

// Keys are the servers that have a supervisor, running or closing.
func (s *Supervisors) Keys() []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]types.NamespacedName, 0, len(s.entries))
	for k := range s.entries {
		keys = append(keys, k)
	}
	return keys
}

// Ensure runs a supervisor for key that runs specKey. An unchanged specKey
// keeps the running one. A new tool filter (same Connection) is applied to
// the running one in place when it is connected, and a new suspendAfterMs
// always. Anything else,
// a new spec generation included, disposes it first (waiting for its close
// barrier, no lock held) and starts a new one that continues its generation
// numbering. While a disposed supervisor of key is still closing, Ensure
// starts nothing and returns an error that wraps bridge.ErrCloseTimeout; once
// it has closed, key is reconciled again through Source.
// See docs/design.md, "Generations and the close barrier" and "Tool sync".
func (s *Supervisors) Ensure(ctx context.Context, key types.NamespacedName, specKey SwapKey, opts bridge.Options) (*bridge.Supervisor, error) {
	select {
	case <-s.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	old := s.entries[key]
	var running SwapKey
	if old != nil {
		running = old.key
	}
	s.mu.Unlock()
	if old != nil && !old.stopping.Load() {
		switch {
		case running.equal(specKey):
			return old.sup, nil
		case running.inPlace(specKey) && (running.Tools.Equal(specKey.Tools) || old.sup.SetToolFilter(specKey.Tools)):
			old.sup.SetSuspendAfter(specKey.SuspendAfter)
			s.mu.Lock()
			old.key = specKey
			s.mu.Unlock()
			return old.sup, nil
		}
	}
	since := time.Now()
	if old != nil {
		opts.BaseGeneration = max(opts.BaseGeneration, old.sup.Snapshot().Generation)
		if err := s.stop(ctx, key, old); err != nil {
			return nil, err
		}
		since = old.started // a swap continues the server's time here (Age)
	}
	return s.start(key, specKey, opts, since), nil
}

func (s *Supervisors) start(key types.NamespacedName, specKey SwapKey, opts bridge.Options, since time.Time) *bridge.Supervisor {
	opts.Registry, opts.Egress, opts.TracerProvider, opts.Shares = s.Registry, s.Egress, s.TracerProvider, s.shares
	opts.OnChange = func() { s.noteChange(key) }
	if opts.Log.GetSink() == nil {
		opts.Log = s.Log
	}
	if s.Tune != nil {
		s.Tune(&opts)
	}
	sup := bridge.New(opts)
	s.mu.Lock()
	ctx, cancel := context.WithCancel(s.ctx)
	s.entries[key] = &supervisorEntry{sup: sup, key: specKey, cancel: cancel, started: since}
	s.mu.Unlock()
	sup.Start(ctx)
	return sup
}

// noteChange is a supervisor's OnChange: key is reconciled by forward.
func (s *Supervisors) noteChange(key types.NamespacedName) {
	s.changedMu.Lock()
	s.changed[key] = struct{}{}
	s.changedMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forward turns the supervisors' change signals into reconcile requests
// until ctx (the manager's) ends: the controller stops reading then.
func (s *Supervisors) forward(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.changedMu.Lock()
		keys := s.changed
		s.changed = map[types.NamespacedName]struct{}{}
		s.changedMu.Unlock()
		for key := range keys {
			obj := &v1alpha1.McpServer{}
			obj.Namespace, obj.Name = key.Namespace, key.Name
			select {
			case s.events <- event.TypedGenericEvent[*v1alpha1.McpServer]{Object: obj}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Stop disposes key's supervisor, if any, and waits for its close barrier.
// The entry stays until the supervisor has closed: when its last generation
// outlives the barrier, Stop returns an error that wraps
// bridge.ErrCloseTimeout and the entry is removed, and key reconciled again,
// only once the generation has closed.
func (s *Supervisors) Stop(ctx context.Context, key types.NamespacedName) error {
	s.mu.Lock()
	e := s.entries[key]
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	return s.stop(ctx, key, e)
}

// disposeSlack is what Stop allows a supervisor beyond its own close
// barrier before it stops waiting; Dispose itself returns at the barrier.
const disposeSlack = 2 * time.Second

func (s *Supervisors) stop(ctx context.Context, key types.NamespacedName, e *supervisorEntry) error {
	e.stopOnce.Do(func() {
		e.stopping.Store(true)
		dctx, cancel := context.WithTimeout(ctx, e.sup.CloseBarrier()+disposeSlack)
		defer cancel()
		err := e.sup.Dispose(dctx)
		if err == nil {
			s.remove(key, e)
			return
		}
		e.stillClosing = fmt.Errorf("the previous connection of %s is still closing: %w", key, err)
		s.Log.Info("disposed supervisor still closing; it stays registered until it has closed",
			"mcpserver", key.String(), "closeBarrier", e.sup.CloseBarrier().String(), "error", err.Error())
		go s.awaitClosed(key, e)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[key] != e {
		return nil // closed meanwhile
	}
	return e.stillClosing
}

// awaitClosed removes a disposed supervisor's entry once its last
// generation has closed and asks for key to be reconciled, so that a
// waiting hot swap or re-creation proceeds.
func (s *Supervisors) awaitClosed(key types.NamespacedName, e *supervisorEntry) {
	select {
	case <-e.sup.Closed():
	case <-s.mgrCtx.Done():
		return
	}
	s.remove(key, e)
	obj := &v1alpha1.McpServer{}
	obj.Namespace, obj.Name = key.Namespace, key.Name
	select {
	case s.events <- event.TypedGenericEvent[*v1alpha1.McpServer]{Object: obj}:
	case <-s.mgrCtx.Done():
	}
}

// remove drops e, if it is still key's entry, and cancels its supervisor.
// A change the supervisor still signals while it closes reconciles key as
// any other does: the reconciler finds no entry, or the next one.
func (s *Supervisors) remove(key types.NamespacedName, e *supervisorEntry) {
	s.mu.Lock()
	if s.entries[key] == e {
		delete(s.entries, key)
	}
	s.mu.Unlock()
	e.cancel()
}

// DisposeAll disposes every supervisor; the manager binary calls it again
// after the manager stops, because on a lost leader election the manager
// exits without waiting for its runnables.
func (s *Supervisors) DisposeAll() {
	keys := s.Keys()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			if err := s.Stop(ctx, k); err != nil {
				s.Log.Error(err, "disposing supervisor at shutdown", "mcpserver", k.String())
			}
		})
	}
	wg.Wait()
}
