package membership

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// sighting is what this replica last saw of a peer's Lease, and when by
// its own clock the Lease last changed: liveness is judged from that, never
// from the renewTime the peer wrote with its clock, as client-go's leader
// election does. See docs/design.md, "Replicas and ownership".
type sighting struct {
	lease  *coordinationv1.Lease
	record string
	at     time.Time
}

// record is what a renewal changes.
func record(l *coordinationv1.Lease) string {
	var renew string
	if t := l.Spec.RenewTime; t != nil {
		renew = t.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s/%s/%s/%d/%s", ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[ProcessAnnotation],
		renew, ptr.Deref(l.Spec.LeaseDurationSeconds, 0), l.Annotations[LeavingAnnotation])
}

// duration is the Lease's own duration, which its holder renews within.
func (m *Membership) duration(l *coordinationv1.Lease) time.Duration {
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return m.cfg.LeaseDuration
}

func (m *Membership) saw(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	holder := ""
	if ok {
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	if holder == "" || LeaseName(holder) != l.Name {
		return // not a replica's Lease
	}
	rec := record(l)
	m.mu.Lock()
	s := m.seen[l.Name]
	if s == nil || s.record != rec {
		s = &sighting{record: rec, at: m.cfg.Now()}
		m.seen[l.Name] = s
	}
	s.lease = l
	m.mu.Unlock()
	m.poke()
}

func (m *Membership) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name == LeaseName(m.cfg.Name) {
		// This replica's own Lease, deleted by someone, is created again
		// at the next renewal; meanwhile it stays live by its renewals.
		return
	}
	if _, leaving := l.Annotations[LeavingAnnotation]; !leaving {
		// Not a replica that stopped (it marks its Lease leaving, lets go
		// of its servers, then deletes it): someone deleted the Lease of
		// a replica that may still run, so it goes when the Lease would
		// have expired, as a crashed one does, and its children count as
		// running until HoldGrace after that.
		return
	}
	m.mu.Lock()
	delete(m.seen, l.Name)
	m.mu.Unlock()
	m.poke()
}

// deadFor is how long past its expiry, in durations, a peer's Lease is
// deleted by whichever replica notices first (never within HoldGrace): a
// crashed replica leaves it behind.
const deadFor = 2

// recompute sets the live set and tells the subscribers who joined or
// left, either the live set or the owners among it (a leaving replica is
// live but owns nothing). It returns when the next member would expire,
// and the Leases dead for deadFor durations.
func (m *Membership) recompute() (next time.Duration, stale []*coordinationv1.Lease) {
	now := m.cfg.Now()
	m.mu.Lock()
	var live []Member
	leaving := map[string]bool{}
	own := LeaseName(m.cfg.Name)
	for name, s := range m.seen {
		d := m.duration(s.lease)
		left := s.at.Add(d).Sub(now)
		if name == own {
			left = min(left, m.renewedAt.Add(fenceAfter(d)).Sub(now))
		}
		if left <= 0 {
			if -left > max(deadFor*d, m.cfg.HoldGrace) && name != own {
				stale = append(stale, s.lease)
				delete(m.seen, name) // collected below, or deleted already
			}
			continue
		}
		live = append(live, Member{Name: *s.lease.Spec.HolderIdentity, Address: s.lease.Annotations[AddressAnnotation],
			Process: s.lease.Annotations[ProcessAnnotation]})
		if _, ok := s.lease.Annotations[LeavingAnnotation]; ok || (name == LeaseName(m.cfg.Name) && m.leaving.Load()) {
			leaving[*s.lease.Spec.HolderIdentity] = true
		}
		if next == 0 || left < next {
			next = left
		}
	}
	slices.SortFunc(live, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	var names, liveNames []string
	for _, mb := range live {
		liveNames = append(liveNames, mb.Name)
		if !leaving[mb.Name] {
			names = append(names, mb.Name)
		}
	}
	changed := symmetricDifference(m.names, names)
	for _, n := range symmetricDifference(memberNames(m.live), liveNames) {
		if !slices.Contains(changed, n) {
			changed = append(changed, n)
		}
	}
	by, hold := m.reportingSelfUnreachable(liveNames, now)
	if hold > 0 && (next == 0 || hold < next) {
		next = hold
	}
	if !slices.Equal(by, m.unreachedBy) && !slices.Contains(changed, m.cfg.Name) {
		// The owner's servers show it (Degraded): their reconciler wakes
		// on this replica's own name.
		changed = append(changed, m.cfg.Name)
	}
	m.live, m.names, m.unreachedBy = live, names, by
	self := slices.Contains(names, m.cfg.Name)
	subs := slices.Clone(m.subs)
	m.mu.Unlock()
	liveReplicas.Set(float64(len(live)))
	selfMember.Set(gaugeBool(self))
	for _, name := range changed {
		m.notify(subs, name)
	}
	return next, stale
}

// unreachedHold, in lease durations, is how long a replica counts in
// UnreachedBy after its Lease last said it cannot reach this one: a peer
// whose reach flaps at each renewal would otherwise have the owner rewrite
// the status of every server it holds as often (docs/design.md, "Visible
// when unreachable").
const unreachedHold = 3

// reportingSelfUnreachable are the live replicas, among names (sorted),
// whose Lease says they cannot reach this one, or said so within
// unreachedHold durations; and when the first of those that no longer say
// so drops out. Called with mu held.
func (m *Membership) reportingSelfUnreachable(names []string, now time.Time) (by []string, next time.Duration) {
	hold := unreachedHold * m.cfg.LeaseDuration
	for name := range m.reportedAt {
		if _, live := slices.BinarySearch(names, name); !live {
			delete(m.reportedAt, name) // a replica that left reaches nobody
		}
	}
	for _, name := range names {
		if s := m.seen[LeaseName(name)]; s != nil && namesUnreachable(s.lease.Annotations[UnreachableAnnotation], m.cfg.Name) {
			m.reportedAt[name] = now
			by = append(by, name)
			continue
		}
		at, ok := m.reportedAt[name]
		if !ok {
			continue
		}
		left := at.Add(hold).Sub(now)
		if left <= 0 {
			delete(m.reportedAt, name)
			continue
		}
		by = append(by, name)
		if next == 0 || left < next {
			next = left
		}
	}
	return by, next
}

// namesUnreachable reports whether an UnreachableAnnotation value (entries
// "name at address since time: error", separated by "; ") has an entry for
// the replica called name.
func namesUnreachable(v, name string) bool {
	return strings.HasPrefix(v, name+" at ") || strings.Contains(v, "; "+name+" at ")
}

func (m *Membership) notify(subs []chan event.GenericEvent, name string) {
	obj := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(name), Namespace: m.cfg.Namespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name)}}
	for _, ch := range subs {
		select {
		case ch <- event.GenericEvent{Object: obj.DeepCopy()}:
		default:
		}
	}
}

// collect deletes dead Leases, only as they were seen: a Lease renewed
// meanwhile has another resourceVersion and stays.
func (m *Membership) collect(ctx context.Context, stale []*coordinationv1.Lease) {
	for _, l := range stale {
		err := m.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
			UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "cannot delete the Lease of a replica that is gone", "lease", l.Name)
		}
	}
}

func memberNames(ms []Member) []string {
	out := make([]string, len(ms))
	for i, mb := range ms {
		out[i] = mb.Name
	}
	return out
}

// symmetricDifference of two sorted lists.
func symmetricDifference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			out = append(out, x)
		}
	}
	for _, x := range b {
		if _, found := slices.BinarySearch(a, x); !found {
			out = append(out, x)
		}
	}
	return out
}
