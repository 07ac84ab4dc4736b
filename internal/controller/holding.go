package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/toolsets"
)

// The replicas share each server's tools, and who holds its connection,
// through its McpToolSet. See docs/design.md, "Replicas and ownership".
// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcptoolsets,verbs=get;list;watch;create;update;patch;delete

// Replicas is what the reconciler asks of the replicas' membership.
type Replicas interface {
	// Owner is the live replica that owns the McpServer with this UID, or
	// "" while this replica knows of none.
	Owner(uid types.UID) string
	// SelfLive reports whether this replica is in its own live set,
	// leaving or not: false before it joined, and once it has gone two
	// thirds of a Lease duration without a renewal the apiserver accepted.
	SelfLive() bool
	// MayHold reports whether the replica called name may still run a
	// stdio server's child: while it is live, and for a grace after its
	// Lease expired (a replica cut off from the apiserver stops its
	// children in that time).
	MayHold(name string) bool
	// UnreachedBy are the live replicas (this one among them when it
	// cannot reach its own address) that report they cannot reach this
	// replica's internal endpoint, sorted.
	UnreachedBy() []string
}

// ownerOf is the replica that owns obj: this one when there are no
// replicas to share with (Replicas nil).
func (r *McpServerReconciler) ownerOf(obj *v1alpha1.McpServer) string {
	if r.Replicas == nil {
		return r.Replica
	}
	return r.Replicas.Owner(obj.UID)
}

// toolSet is obj's McpToolSet from the cache, or nil.
func (r *McpServerReconciler) toolSet(ctx context.Context, key types.NamespacedName) (*v1alpha1.McpToolSet, error) {
	return readToolSet(ctx, r.Client, key)
}

// liveToolSet is obj's McpToolSet as the apiserver has it, or nil.
func (r *McpServerReconciler) liveToolSet(ctx context.Context, key types.NamespacedName) (*v1alpha1.McpToolSet, error) {
	return readToolSet(ctx, r.APIReader, key)
}

func readToolSet(ctx context.Context, c client.Reader, key types.NamespacedName) (*v1alpha1.McpToolSet, error) {
	ts := &v1alpha1.McpToolSet{}
	if err := c.Get(ctx, key, ts); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return ts, nil
}

// letGo is a replica's part for a server that another replica owns: it
// writes nothing of the server's status and stops its supervisor, if it
// runs one, once its calls in flight are answered. A Streamable HTTP
// connection stays until the new owner has published (make before break);
// a stdio server's child is reaped first, then the McpToolSet released, so
// that the new owner starts its own only then (break before make).
func (r *McpServerReconciler) letGo(ctx context.Context, obj *v1alpha1.McpServer) error {
	key := client.ObjectKeyFromObject(obj)
	ts, err := r.toolSet(ctx, key)
	if err != nil {
		return err
	}
	held := ts != nil && ts.Spec.Holder == r.Replica
	sup := r.Supervisors.Get(key)
	if sup != nil && held && obj.Spec.Transport == v1alpha1.TransportStreamableHTTP {
		return nil // until the new owner holds it
	}
	if sup != nil {
		ctrl.LoggerFrom(ctx).Info("handing the server over to its owner", "owner", r.ownerOf(obj))
		if err := stopped(r.Supervisors.StopWhenIdle(ctx, key)); err != nil {
			return err
		}
	}
	if r.Supervisors.Present(key) {
		return nil // its last generation still closing: released once closed (reconciled again then)
	}
	if sup != nil || held {
		forgetMetrics(obj.Namespace, obj.Name) // the owner reports it now
	}
	if held {
		return r.setHolder(ctx, ts, "")
	}
	return nil
}

// claimConnection makes this replica the holder of obj's stdio server before it
// starts the server's child, unless another live replica still holds it:
// then ok is false and the verdict says whom it waits for.
func (r *McpServerReconciler) claimConnection(ctx context.Context, obj *v1alpha1.McpServer, p *policy.Policy) (verdict, bool, error) {
	key := client.ObjectKeyFromObject(obj)
	ts, err := r.toolSet(ctx, key)
	if err != nil {
		return verdict{}, false, err
	}
	if ts != nil && ts.Spec.Holder == r.Replica && r.Supervisors.Get(key) != nil {
		return verdict{}, true, nil // held and running here
	}
	// About to start a child: the cache may be behind the apiserver (a
	// replica whose connection to it just came back still sees itself as
	// the holder the peer has replaced meanwhile), so the holder is read
	// from the apiserver. See docs/design.md, "Handoff".
	if ts, err = r.liveToolSet(ctx, key); err != nil {
		return verdict{}, false, err
	}
	switch {
	case ts == nil:
		ts = r.newToolSet(obj, p)
		if err := r.createToolSet(ctx, obj, ts); err != nil {
			return verdict{}, false, err
		}
		return verdict{}, true, nil
	case ts.Spec.Holder == r.Replica:
		return verdict{}, true, nil
	case ts.Spec.Holder != "" && r.Replicas != nil:
		if r.Replicas.MayHold(ts.Spec.Holder) {
			return verdict{phase: v1alpha1.PhasePending, reason: v1alpha1.ReasonHandingOver,
				message: fmt.Sprintf("Waiting for replica %q to close the server's connection; this replica starts it then", ts.Spec.Holder)}, false, nil
		}
	}
	return verdict{}, true, r.setHolder(ctx, ts, r.Replica)
}

// publish writes what obj's supervisor has published into its McpToolSet,
// with this replica as its holder: once the server is connected (so that
// a Streamable HTTP server is taken over only ready to serve), and while it
// holds the McpToolSet, whatever the supervisor publishes since.
func (r *McpServerReconciler) publish(ctx context.Context, obj *v1alpha1.McpServer, p *policy.Policy, sup *bridge.Supervisor) (verdict, error) {
	if r.Replicas == nil {
		return verdict{}, nil
	}
	key := client.ObjectKeyFromObject(obj)
	ts, err := r.toolSet(ctx, key)
	if err != nil {
		return verdict{}, err
	}
	held := ts != nil && ts.Spec.Holder == r.Replica
	switch sup.Snapshot().Phase {
	case v1alpha1.PhaseReady, v1alpha1.PhaseIdle:
	case v1alpha1.PhaseReconnecting, v1alpha1.PhaseFailed:
		if !held {
			return verdict{}, nil
		}
	default:
		return verdict{}, nil
	}
	enc, err := toolsets.Encode(r.Supervisors.Registry.Owned(obj.Namespace, key.String()))
	var tooLarge *toolsets.TooLargeError
	if errors.As(err, &tooLarge) {
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonToolSetTooLarge, message: tooLarge.Error()})
	}
	if err != nil {
		return verdict{}, err
	}
	want := r.newToolSet(obj, p)
	want.Spec.Tools, want.Spec.Digest, want.Spec.ToolCount = enc.Gzip, enc.Digest, enc.Count
	if ts == nil {
		return verdict{}, r.createToolSet(ctx, obj, want)
	}
	if held && ts.Spec.Digest == want.Spec.Digest && ts.Spec.ServerName == want.Spec.ServerName &&
		ts.Spec.ConnectionTimeoutMs == want.Spec.ConnectionTimeoutMs {
		return verdict{}, nil
	}
	orig := ts.DeepCopy()
	ts.Spec = want.Spec
	return verdict{}, r.patchToolSet(ctx, orig, ts)
}

func (r *McpServerReconciler) newToolSet(obj *v1alpha1.McpServer, p *policy.Policy) *v1alpha1.McpToolSet {
	ts := &v1alpha1.McpToolSet{}
	ts.Namespace, ts.Name = obj.Namespace, obj.Name
	ts.Labels = podruntime.Labels(obj.Name) // what the manager-writes policy asks of its objects
	ts.Spec.ServerName = p.ServerName
	ts.Spec.Holder = r.Replica
	ts.Spec.ConnectionTimeoutMs = p.ConnectionTimeout.Milliseconds()
	return ts
}

func (r *McpServerReconciler) createToolSet(ctx context.Context, obj *v1alpha1.McpServer, ts *v1alpha1.McpToolSet) error {
	if err := controllerutil.SetControllerReference(obj, ts, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, ts); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return errRecreate // the cache is behind: look again
		}
		return fmt.Errorf("create the McpToolSet: %w", err)
	}
	return nil
}

// setHolder names holder in ts, if ts is still as read.
func (r *McpServerReconciler) setHolder(ctx context.Context, ts *v1alpha1.McpToolSet, holder string) error {
	orig := ts.DeepCopy()
	ts.Spec.Holder = holder
	return r.patchToolSet(ctx, orig, ts)
}

func (r *McpServerReconciler) patchToolSet(ctx context.Context, orig, ts *v1alpha1.McpToolSet) error {
	err := r.Client.Patch(ctx, ts, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return errRecreate // someone else wrote it first: look again
	case err != nil:
		return fmt.Errorf("write the McpToolSet: %w", err)
	}
	return nil
}

// dropToolSet deletes key's McpToolSet, if this replica owns the server:
// its tools leave every replica's gateway.
func (r *McpServerReconciler) dropToolSet(ctx context.Context, key types.NamespacedName) error {
	if r.Replicas == nil {
		return nil
	}
	ts := &v1alpha1.McpToolSet{}
	ts.Namespace, ts.Name = key.Namespace, key.Name
	return client.IgnoreNotFound(r.Client.Delete(ctx, ts))
}

// holderChanged passes the McpToolSet events that a replica letting go of
// a server waits for: a new holder, or the set gone.
func holderChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.McpToolSet)
			n, ok2 := e.ObjectNew.(*v1alpha1.McpToolSet)
			return !ok1 || !ok2 || o.Spec.Holder != n.Spec.Holder
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// moved maps a replica joining or leaving to the servers whose owner may
// have changed for this replica, or that wait for one that left: those it
// owns but does not run, and those it runs but no longer owns. The others
// keep their connection.
func (r *McpServerReconciler) moved(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.McpServerList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list McpServers after a membership change")
		return nil
	}
	var reqs []reconcile.Request
	unreached := r.unreachedMessage()
	for i := range list.Items {
		m := &list.Items[i]
		key := client.ObjectKeyFromObject(m)
		owns, runs := r.ownerOf(m) == r.Replica, r.Supervisors.Get(key) != nil
		// Owned but not run: new here, or waiting for a holder that may
		// just have left (HandingOver). Owned and run: a peer that stopped
		// or started reaching this replica shows in Degraded.
		if owns != (m.Status.Replica == r.Replica) || owns != runs || owns && r.reachStale(m, unreached) {
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}
