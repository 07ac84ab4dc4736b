package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// A replica's Lease: named after it, labelled for the peers' watch, its
// holder the replica's name, its address and process in annotations.
const (
	leasePrefix = "mcpbridge-replica-"
	// ComponentLabel marks the replicas' Leases with the value "replica".
	ComponentLabel = "app.kubernetes.io/component"
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// AddressAnnotation holds --replica-advertise-address.
	AddressAnnotation = "mcpbridge.dev/replica-address"
	// ProcessAnnotation holds a random id per process, which tells a
	// second process with the same --replica-name from the first.
	ProcessAnnotation = "mcpbridge.dev/replica-process"
	// LeavingAnnotation marks the Lease of a replica that is shutting
	// down: it is still live (its peers forward to it and wait for it to
	// let go of a stdio server) but owns nothing, so that its servers move
	// at once rather than when it exits.
	LeavingAnnotation = "mcpbridge.dev/replica-leaving"
	// UnreachableAnnotation lists the replicas this one cannot reach at
	// their advertised addresses (itself included), with since when and
	// why; absent while it reaches them all. See docs/design.md,
	// "Forwarding between replicas".
	UnreachableAnnotation = "mcpbridge.dev/replica-unreachable"
	leaseSelector         = ComponentLabel + "=replica," + ManagedByLabel + "=mcpbridge"
)

// LeaseName is the name of a replica's Lease.
func LeaseName(replica string) string { return leasePrefix + replica }

// errTakenOver: another process with this replica's name holds the Lease.
var errTakenOver = errors.New("taken over")

// acquire creates this replica's Lease, or takes it over from a process
// with the same name that has not renewed it for a lease duration (this
// replica's previous process, which crashed). A process that does renew it
// is another live replica with the same name: an error.
func (m *Membership) acquire(ctx context.Context) (*coordinationv1.Lease, error) {
	name := LeaseName(m.cfg.Name)
	var first string
	var deadline time.Time
	for ctx.Err() == nil {
		cur, err := m.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l, err := m.stamped(func() (*coordinationv1.Lease, error) {
				return m.leases.Create(ctx, m.newLease(), metav1.CreateOptions{})
			})
			if err == nil || !apierrors.IsAlreadyExists(err) {
				return l, m.leaseError("create", err)
			}
			continue
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return nil, m.leaseError("read", err) // RBAC: waiting would not help
		case err != nil:
			ctrl.LoggerFrom(ctx).Error(err, "cannot read the replica Lease; retrying", "lease", name)
		case first == "":
			first, deadline = record(cur), m.cfg.Now().Add(m.duration(cur))
		case record(cur) != first:
			return nil, fmt.Errorf("another live replica already holds --replica-name=%q (Lease %s/%s, address %q, renewed at %s): "+
				"give each replica its own name (the default is the Pod's name, env POD_NAME)",
				m.cfg.Name, m.cfg.Namespace, name, cur.Annotations[AddressAnnotation], cur.Spec.RenewTime)
		case !m.cfg.Now().Before(deadline):
			l := m.renewed(cur)
			l.Spec.AcquireTime = l.Spec.RenewTime
			l, err = m.stamped(func() (*coordinationv1.Lease, error) { return m.leases.Update(ctx, l, metav1.UpdateOptions{}) })
			if err == nil || !apierrors.IsConflict(err) {
				return l, m.leaseError("take over", err)
			}
			first = ""
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.cfg.LeaseDuration / 4):
		}
	}
	return nil, nil
}

// renew writes a new renewTime. A Lease deleted by someone is created
// again (a peer collects it once it has been expired for long enough, as
// when this replica was cut off from the apiserver: the update of a
// deleted object fails its uid precondition with a conflict, not
// NotFound); one another process took over ends this replica.
func (m *Membership) renew(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return m.stamped(func() (*coordinationv1.Lease, error) { return m.write(ctx, lease) })
}

// stamped runs a write of this replica's Lease and, when the apiserver
// accepts it, records when it was sent (fencing: see accepted).
func (m *Membership) stamped(write func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	sent := m.cfg.Now()
	l, err := write()
	if err == nil {
		m.accepted(sent)
	}
	return l, err
}

func (m *Membership) write(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseDuration/3)
	defer cancel()
	l, err := m.leases.Update(ctx, m.renewed(lease), metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return m.leases.Create(ctx, m.newLease(), metav1.CreateOptions{})
	case apierrors.IsConflict(err):
		cur, err := m.leases.Get(ctx, lease.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return m.leases.Create(ctx, m.newLease(), metav1.CreateOptions{})
		}
		if err != nil {
			return nil, err
		}
		if cur.Annotations[ProcessAnnotation] != m.process {
			return nil, fmt.Errorf("another process (%s, address %q) took over the Lease %s/%s of --replica-name=%q: "+
				"another replica runs with this name: %w", cur.Annotations[ProcessAnnotation], cur.Annotations[AddressAnnotation],
				m.cfg.Namespace, lease.Name, m.cfg.Name, errTakenOver)
		}
		return m.leases.Update(ctx, m.renewed(cur), metav1.UpdateOptions{})
	}
	return l, err
}

// release deletes the Lease, if it is still this process's, so that the
// peers drop this replica at once instead of after its lease duration.
func (m *Membership) release(ctx context.Context, lease *coordinationv1.Lease) {
	if m.keepLease {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.LeaseDuration)
	defer cancel()
	err := m.leases.Delete(ctx, lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Error(err, "cannot delete the replica Lease; the peers drop this replica when it expires", "lease", lease.Name)
		return
	}
	ctrl.LoggerFrom(ctx).Info("left the replicas", "lease", lease.Name)
}

func (m *Membership) newLease() *coordinationv1.Lease {
	now := metav1.NewMicroTime(m.cfg.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: LeaseName(m.cfg.Name), Namespace: m.cfg.Namespace,
			Labels:      map[string]string{ComponentLabel: "replica", ManagedByLabel: "mcpbridge"},
			Annotations: m.annotations(),
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(m.cfg.Name),
			LeaseDurationSeconds: ptr.To(int32(m.cfg.LeaseDuration / time.Second)),
			AcquireTime:          &now, RenewTime: &now,
		},
	}
}

// renewed is l renewed now by this process.
func (m *Membership) renewed(l *coordinationv1.Lease) *coordinationv1.Lease {
	fresh := m.newLease()
	l = l.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for k, v := range fresh.Labels {
		l.Labels[k] = v
	}
	for k, v := range fresh.Annotations {
		l.Annotations[k] = v
	}
	for _, k := range []string{LeavingAnnotation, UnreachableAnnotation} {
		if _, ok := fresh.Annotations[k]; !ok {
			delete(l.Annotations, k) // no longer so, or a previous process's
		}
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime =
		fresh.Spec.HolderIdentity, fresh.Spec.LeaseDurationSeconds, fresh.Spec.RenewTime
	return l
}

func (m *Membership) leaseError(verb string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s the replica Lease %s/%s: %w", verb, m.cfg.Namespace, LeaseName(m.cfg.Name), err)
}

// annotations are those this process writes on its Lease.
func (m *Membership) annotations() map[string]string {
	a := map[string]string{AddressAnnotation: m.cfg.Address, ProcessAnnotation: m.process}
	if m.leaving.Load() {
		a[LeavingAnnotation] = "true"
	}
	if m.unreachable != nil {
		if v := m.unreachable(); v != "" {
			a[UnreachableAnnotation] = v
		}
	}
	return a
}

// leave marks the Lease as leaving, so that the peers move this replica's
// servers now, and then closes Leaving. A Lease that could not be marked
// leaves Leaving open: the peers would not take the servers, which stay
// here until the Lease is deleted at exit.
func (m *Membership) leave(ctx context.Context, lease *coordinationv1.Lease) *coordinationv1.Lease {
	m.leaving.Store(true)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.LeaseDuration/3)
	defer cancel()
	l, err := m.renew(ctx, lease)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "cannot mark the replica Lease as leaving; the servers move when it is deleted", "lease", lease.Name)
		return lease
	}
	m.recompute() // this replica's own view (its watch has stopped): it owns nothing
	ctrl.LoggerFrom(ctx).Info("leaving the replicas: handing the servers over", "lease", lease.Name)
	m.markLeft()
	return l
}
