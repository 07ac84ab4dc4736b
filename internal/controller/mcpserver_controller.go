package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/policy"
)

// McpServerReconciler runs one supervisor per McpServer and writes status
// from its snapshots.
type McpServerReconciler struct {
	Client client.Client
	// APIReader reads Secrets and ConfigMaps without an informer cache.
	APIReader   client.Reader
	Recorder    events.EventRecorder
	Supervisors *Supervisors
	// MaxConcurrentReconciles defaults to 8.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the indexes, watches and the supervisor set.
func (r *McpServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.McpServer{}, indexServerName, indexServerNameFunc); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.McpServer{}, indexRefs, indexRefsFunc); err != nil {
		return err
	}
	if err := mgr.Add(r.Supervisors); err != nil {
		return err
	}
	c := mgr.GetClient()
	return ctrl.NewControllerManagedBy(mgr).
		Named("mcpserver").
		// Our own status writes bump neither generation nor annotations.
		For(&v1alpha1.McpServer{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&v1alpha1.McpServer{}, peersHandler(c)).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(mapRefHolders(c, policy.SecretRef))).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(mapRefHolders(c, policy.ConfigMapRef))).
		WatchesRawSource(r.Supervisors.Source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 8)}).
		Complete(r)
}

// Reconcile brings one McpServer's supervisor in line with its spec and
// patches status once, at the end, only when it changed.
func (r *McpServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	// Read through the API, not the cache: a status patch computed against
	// a cache that has not seen our previous write would drop fields.
	obj := &v1alpha1.McpServer{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			recordGauges(req.Namespace, req.Name, nil)
			return ctrl.Result{}, stopped(r.Supervisors.Stop(ctx, req.NamespacedName))
		}
		return ctrl.Result{}, err
	}
	if obj.DeletionTimestamp != nil {
		return ctrl.Result{}, stopped(r.Supervisors.Stop(ctx, req.NamespacedName))
	}
	orig := obj.DeepCopy()
	v, err := r.decide(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	applyStatus(obj, serverNameOf(obj), v)
	r.emitEvents(obj, &orig.Status, v)
	recordGauges(obj.Namespace, obj.Name, v.snap)
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// decide checks ownership and the spec, then runs (or swaps) the supervisor.
// Every verdict without a running supervisor stops the old one first.
func (r *McpServerReconciler) decide(ctx context.Context, obj *v1alpha1.McpServer) (verdict, error) {
	key := client.ObjectKeyFromObject(obj)
	serverName := serverNameOf(obj)
	holder, err := serverNameHolder(ctx, r.Client, obj.Namespace, serverName)
	if err != nil {
		return verdict{}, err
	}
	if holder != nil && holder.Name != obj.Name {
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhaseConflict, reason: v1alpha1.ReasonServerNameConflict,
			message: fmt.Sprintf("The serverName %q is held by the older McpServer %q; this one connects when it is released", serverName, holder.Name)})
	}
	values, err := readValues(ctx, r.APIReader, obj.Namespace, policy.Refs(&obj.Spec))
	if err != nil {
		return verdict{}, err
	}
	// Every namespace runs Local until the manager's flags choose (see
	// docs/design.md, "Choosing a runtime").
	p, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, values, policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}})
	var missing *policy.MissingRefError
	switch {
	case errors.As(err, &missing):
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhasePending, reason: v1alpha1.ReasonSecretNotFound,
			message: fmt.Sprintf("Waiting for %s (%s)", missing.Ref, missing.Field)})
	case err != nil:
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhaseInvalid, reason: v1alpha1.ReasonInvalidSpec,
			message: "Invalid spec: " + err.Error()})
	}
	sup, err := r.Supervisors.Ensure(ctx, key, swapKey(obj, p), bridge.Options{
		Namespace: obj.Namespace, Name: obj.Name, Policy: p,
		BaseGeneration: obj.Status.ConnectionGeneration,
		Log:            ctrl.LoggerFrom(ctx), Observer: observer{ns: obj.Namespace, name: obj.Name},
	})
	if errors.Is(err, bridge.ErrCloseTimeout) {
		// The previous supervisor's server outlived its close barrier: no
		// second one starts until it is gone; Supervisors reconciles this
		// resource again then.
		return verdict{phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonCloseTimeout,
			message: "The previous connection did not close within its close barrier; the new one starts once it has"}, nil
	}
	if err != nil {
		return verdict{}, err
	}
	v := verdictFromSnapshot(sup.Snapshot())
	r.emitSupervisorEvents(obj, sup)
	return v, nil
}

// halt stops the supervisor (its tools leave the registry) and returns v.
func (r *McpServerReconciler) halt(ctx context.Context, key client.ObjectKey, v verdict) (verdict, error) {
	return v, stopped(r.Supervisors.Stop(ctx, key))
}

// stopped treats a supervisor that is still closing past its close barrier
// as stopped: its tools are gone, Supervisors keeps it from being replaced
// until it has closed, and reconciles the resource again then.
func stopped(err error) error {
	if errors.Is(err, bridge.ErrCloseTimeout) {
		return nil
	}
	return err
}

// swapKey is what the supervisor of obj runs: a new spec generation, a new
// restartedAt annotation or a changed resolved value is a hot swap, except
// that a change of spec.tools alone is applied in place (see
// Supervisors.Ensure).
// See docs/design.md, "Hot swap and disposal".
func swapKey(obj *v1alpha1.McpServer, p *policy.Policy) SwapKey {
	return SwapKey{
		Connection: obj.Annotations[v1alpha1.RestartedAtAnnotation] + "/" + p.ConnectionFingerprint(),
		Generation: obj.Generation,
		Tools:      p.Tools,
	}
}

// conflictRetry is how soon a status write that lost a race is retried.
const conflictRetry = 50 * time.Millisecond
