package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Config says who this replica is and where the Leases live.
type Config struct {
	// Name is the replica's identity (--replica-name), unique among the
	// replicas; its Lease is LeaseName(Name).
	Name string
	// Address is where the other replicas reach this one
	// (--replica-advertise-address).
	Address string
	// Namespace holds the replicas' Leases: the manager's own.
	Namespace string
	// LeaseDuration (--replica-lease-duration) is how long a replica stays
	// a member after its peers last saw it renew; it renews every third of
	// it. Whole seconds, as a Lease stores it.
	LeaseDuration time.Duration
	Client        kubernetes.Interface
	// Now is this replica's clock; nil is time.Now. Tests skew it.
	Now func() time.Time
	// ReleaseAfter, when set, keeps the Lease renewed after Start's
	// context ends until it is closed (at most MaxReleaseWait): the
	// manager closes it once its supervisors are disposed, so that no
	// peer starts a server's child while this replica's may still run.
	ReleaseAfter <-chan struct{}
	// HoldGrace is how long after a peer's Lease expired the peer may
	// still be reaping the children of the stdio servers it held (the
	// supervisors' close barrier): MayHold answers true until then. See
	// docs/design.md, "Replicas and ownership": fencing.
	HoldGrace time.Duration
}

// fenceAfter is how long after its last accepted renewal a replica counts
// itself out of the live set: two thirds of the duration, as client-go's
// leader election gives up at its renew deadline, so that it lets go of
// its servers a third of a duration before any peer may take them.
func fenceAfter(d time.Duration) time.Duration { return d * 2 / 3 }

// MaxReleaseWait bounds how long a stopping replica keeps its Lease for
// Config.ReleaseAfter, within a Pod's default grace period of 30 s.
const MaxReleaseWait = 25 * time.Second

// Member is a live replica.
type Member struct {
	Name    string
	Address string
	// Process is the id of the replica's process (its Lease's
	// mcpbridge.dev/replica-process): a replica restarted under the same
	// name has another.
	Process string
}

// Membership keeps this replica's Lease and the live set of all replicas.
// Start runs it; Owner, Members and Subscribe may be called at any time.
type Membership struct {
	cfg      Config
	process  string // random per process: a second process with our name differs
	leases   coordinationclient.LeaseInterface
	kick     chan struct{}
	joined   chan struct{}
	left     chan struct{}
	leftOnce sync.Once
	leaving  atomic.Bool
	// keepLease leaves the Lease behind on stop, as a crash does (tests).
	keepLease bool
	// unreachable says which replicas this one cannot reach; see
	// ReportUnreachable.
	unreachable func() string

	mu   sync.RWMutex
	seen map[string]*sighting // by Lease name
	// renewedAt is when, by this replica's clock, it sent the last write
	// of its Lease that the apiserver accepted: every peer saw that write
	// later, so a replica that judges itself from it leaves their live
	// sets after it has left its own (fenceAfter).
	renewedAt time.Time
	live      []Member // sorted by name
	names     []string // the names of live, for Owner
	// unreachedBy are the live replicas that cannot reach this one, for
	// UnreachedBy; reportedAt is when each last said so.
	unreachedBy []string
	reportedAt  map[string]time.Time
	subs        []chan event.GenericEvent
}

// New checks cfg; the Membership does nothing until Start.
func New(cfg Config) (*Membership, error) {
	if cfg.Name == "" || cfg.Namespace == "" || cfg.Client == nil {
		return nil, errors.New("membership needs a replica name, a namespace and a client")
	}
	if cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("lease duration %s must be a whole number of seconds, at least 1s", cfg.LeaseDuration)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &Membership{
		cfg: cfg, process: hex.EncodeToString(id),
		leases: cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		kick:   make(chan struct{}, 1), joined: make(chan struct{}), left: make(chan struct{}),
		seen: map[string]*sighting{}, reportedAt: map[string]time.Time{},
	}, nil
}

// NeedLeaderElection is false: every replica is a member, leader or not.
func (m *Membership) NeedLeaderElection() bool { return false }

// Name is this replica's name.
func (m *Membership) Name() string { return m.cfg.Name }

// Joined is closed once this replica holds its Lease.
func (m *Membership) Joined() <-chan struct{} { return m.joined }

// ReportUnreachable has every renewal of the Lease carry f's answer (the
// replicas this one cannot reach, "" for none) in UnreachableAnnotation.
// Call it before Start.
func (m *Membership) ReportUnreachable(f func() string) { m.unreachable = f }

// Leaving is closed once this replica, stopping, has marked its Lease as
// leaving: from then on its peers own its servers, and it lets go of those
// it still runs. It is also closed when Start returns. See
// docs/design.md, "Replicas and ownership": shutdown.
func (m *Membership) Leaving() <-chan struct{} { return m.left }

// Owner is the live replica that owns the McpServer with this UID, or ""
// while no replica is live: a leaving replica owns nothing. See
// docs/design.md, "Replicas and ownership".
func (m *Membership) Owner(uid types.UID) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return rendezvous(string(uid), m.names)
}

// Member reports whether this replica is in the live set as it sees it:
// its own Lease renewed within its duration, and not leaving. A replica
// that is not owns nothing (mcpbridge_replica_member 0).
func (m *Membership) Member() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Contains(m.names, m.cfg.Name)
}

// MayHold reports whether the replica called name may still run the child
// of a stdio server it held: while it is live, and for HoldGrace after its
// Lease expired, in which a replica cut off from the apiserver has reaped
// its children (it counts itself out of the live set before its peers do).
// A replica whose Lease was deleted has let go of everything. left is how
// long the answer stays true.
func (m *Membership) MayHold(name string) (ok bool, left time.Duration) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.seen[LeaseName(name)]
	if s == nil {
		return false, 0
	}
	left = s.at.Add(m.duration(s.lease) + m.cfg.HoldGrace).Sub(m.cfg.Now())
	return left > 0, max(left, 0)
}

// accepted records that the apiserver accepted a write of this replica's
// Lease sent at sent, and has the live set judged again.
func (m *Membership) accepted(sent time.Time) {
	m.mu.Lock()
	if sent.After(m.renewedAt) {
		m.renewedAt = sent
	}
	m.mu.Unlock()
	m.poke()
}

// Members are the live replicas, sorted by name.
func (m *Membership) Members() []Member {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.live)
}

// Subscribe returns a channel for a controller's source.Channel: one event
// per replica that joined or left the live set, its object that replica's
// Lease (name and holder set), after which Owner answers for the new set.
// The servers whose owner may have changed are those Owner now gives to a
// replica that joined, and those a replica that left owned. A change of
// UnreachedBy comes as an event for this replica's own Lease. Events are
// dropped while 64 wait unread.
func (m *Membership) Subscribe() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 64)
	m.mu.Lock()
	m.subs = append(m.subs, ch)
	m.mu.Unlock()
	return ch
}

// Start watches the Leases, takes this replica's own (refusing when a live
// process holds the same name), renews it until ctx ends, then deletes it
// so that the peers move its servers at once.
func (m *Membership) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("membership").WithValues("replica", m.cfg.Name)
	ctx = ctrl.LoggerInto(ctx, log)
	inf := cache.NewSharedIndexInformer(cache.NewFilteredListWatchFromClient(
		m.cfg.Client.CoordinationV1().RESTClient(), "leases", m.cfg.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = leaseSelector }), &coordinationv1.Lease{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: m.saw, UpdateFunc: func(_, obj any) { m.saw(obj) }, DeleteFunc: m.gone,
	}); err != nil {
		return err
	}
	defer m.markLeft() // however Start ends
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(runCtx) })
	wg.Go(func() { m.judge(runCtx) })
	defer wg.Wait()
	defer stop()
	lease, err := m.acquire(ctx)
	if err != nil || lease == nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		m.release(ctx, m.leave(ctx, lease)) // stopped before the first list
		return nil
	}
	log.Info("joined the replicas", "lease", lease.Name, "address", m.cfg.Address)
	close(m.joined)
	return m.hold(ctx, lease)
}

// hold renews the Lease every third of its duration until ctx ends; a
// renewal that failed is tried again every tenth, so that one lost write
// does not leave the replica out of its own live set (fenceAfter).
func (m *Membership) hold(ctx context.Context, lease *coordinationv1.Lease) error {
	every, retry := m.cfg.LeaseDuration/3, m.cfg.LeaseDuration/10
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.release(ctx, m.holdWhileStopping(ctx, m.leave(ctx, lease)))
			return nil
		case <-t.C:
		}
		l, err := m.renew(ctx, lease)
		switch {
		case errors.Is(err, errTakenOver):
			return err
		case err != nil && ctx.Err() == nil:
			ctrl.LoggerFrom(ctx).Error(err, "cannot renew the replica Lease; retrying", "lease", lease.Name, "in", retry.String())
			t.Reset(retry)
			continue
		case err == nil:
			lease = l
		}
		t.Reset(every)
	}
}

// judge recomputes the live set whenever a Lease changes and when the next
// member would expire.
func (m *Membership) judge(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, stale := m.recompute()
		m.collect(ctx, stale)
		if next <= 0 {
			next = time.Hour
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-timer.C:
		}
	}
}

// holdWhileStopping keeps renewing the Lease after ctx ended until
// ReleaseAfter is closed, and returns it as last renewed.
func (m *Membership) holdWhileStopping(ctx context.Context, lease *coordinationv1.Lease) *coordinationv1.Lease {
	if m.cfg.ReleaseAfter == nil {
		return lease
	}
	ctx = context.WithoutCancel(ctx)
	limit := time.NewTimer(MaxReleaseWait)
	defer limit.Stop()
	t := time.NewTicker(m.cfg.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-m.cfg.ReleaseAfter:
			return lease
		case <-limit.C:
			return lease
		case <-t.C:
		}
		if l, err := m.renew(ctx, lease); err == nil {
			lease = l
		}
	}
}

func (m *Membership) markLeft() { m.leftOnce.Do(func() { close(m.left) }) }

func (m *Membership) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// UnreachedBy are the live replicas, sorted by name and this one among
// them when it cannot reach its own advertised address, whose Lease says
// (UnreachableAnnotation) that they cannot reach this replica: calls they
// forward to it fail. A replica stays among them for three lease durations
// after it last said so. A change of them is signalled to the subscribers
// as an event for this replica's own Lease.
func (m *Membership) UnreachedBy() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.unreachedBy)
}

// Live reports whether the replica called name is in the live set, and
// where it is.
func (m *Membership) Live(name string) (Member, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, found := slices.BinarySearchFunc(m.live, name, func(mb Member, n string) int { return strings.Compare(mb.Name, n) })
	if !found {
		return Member{}, false
	}
	return m.live[i], true
}
