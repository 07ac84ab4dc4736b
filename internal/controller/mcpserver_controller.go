package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// McpServerReconciler runs one supervisor per McpServer and writes status
// from its snapshots.
type McpServerReconciler struct {
	Client client.Client
	// APIReader reads without an informer cache: Secrets and ConfigMaps,
	// and the McpToolSet of a stdio server about to start.
	APIReader   client.Reader
	Recorder    events.EventRecorder
	Supervisors *Supervisors
	// Runtime is the administrator's choice of where stdio servers run
	// (--local-stdio-namespaces, --node-image, --python-image). The zero
	// value runs every stdio server in a Pod of its own.
	Runtime policy.RuntimeConfig
	// PodRuntime renders the servers' Pods; ShimImage (--shim-image) is
	// required once any server runs in a Pod.
	PodRuntime podruntime.Options
	// Replica is this manager replica's name (--replica-name), which the
	// status of every server it reconciles names as its owner.
	// See docs/design.md, "Replicas and ownership".
	Replica string
	// Replicas, when set, shares the servers among the replicas: this one
	// runs only the servers it owns, and writes each one's McpToolSet.
	// Nil: this replica runs every server and writes no McpToolSet.
	Replicas Replicas
	// Membership signals each replica that joins or leaves (nil without
	// Replicas).
	Membership <-chan event.GenericEvent
	// Leaving is closed once this replica, stopping, owns nothing any more
	// (nil without Replicas): it then hands its stdio servers over.
	Leaving <-chan struct{}
	// MaxConcurrentReconciles defaults to 8.
	MaxConcurrentReconciles int
	// FirstStatusWait is how long a new McpServer's first status waits
	// for its first connection: one write (Ready) instead of two
	// (Connecting, then Ready). 0 is 2 s; negative writes at once.
	// See docs/design.md, "The first status".
	FirstStatusWait time.Duration

	pods *Pods // finds each Pod-runtime server's Pod; built by SetupWithManager
	// written: this replica's last status write per server; built by
	// SetupWithManager.
	written *writtenVersions
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
	r.pods = &Pods{Reader: mgr.GetCache()}
	r.written = newWrittenVersions()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("mcpserver").
		// Our own status writes bump neither generation nor annotations.
		For(&v1alpha1.McpServer{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&v1alpha1.McpServer{}, peersHandler(c)).
		// A server's Deployment edited or deleted by hand is put back; its
		// status changes (the Pod's) reach status through the supervisor.
		Owns(&appsv1.Deployment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&networkingv1.NetworkPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.Pod{}, r.pods.Handler())).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(mapSecretUsers(c))).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(mapRefHolders(c, policy.ConfigMapRef))).
		WatchesRawSource(r.Supervisors.Source()).
		// Every replica runs its own share; none waits for a leader.
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 8),
			NeedLeaderElection: ptr.To(false)})
	if r.Leaving != nil {
		if err := mgr.Add(handOver{r: r}); err != nil {
			return err
		}
	}
	if r.Replicas != nil {
		b = b.Owns(&v1alpha1.McpToolSet{}, builder.WithPredicates(holderChanged())).
			WatchesRawSource(source.Channel(r.Membership, handler.EnqueueRequestsFromMapFunc(r.moved)))
	}
	return b.Complete(r)
}

// Reconcile brings one McpServer's supervisor in line with its spec and
// patches status once, at the end, only when it changed.
func (r *McpServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	obj, err := r.read(ctx, req.NamespacedName)
	if err == nil && obj.DeletionTimestamp == nil {
		if owner := r.ownerOf(obj); owner != r.Replica {
			r.written.forget(req.NamespacedName)
			return r.notOwned(ctx, obj, owner)
		}
		if !r.cacheIsEnough(obj) {
			obj = &v1alpha1.McpServer{}
			err = r.APIReader.Get(ctx, req.NamespacedName, obj)
		}
	}
	if apierrors.IsNotFound(err) {
		forgetMetrics(req.Namespace, req.Name)
		r.written.forget(req.NamespacedName)
		_, err := r.halt(ctx, req.NamespacedName, verdict{})
		return ctrl.Result{}, err
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if obj.DeletionTimestamp != nil {
		_, err := r.halt(ctx, req.NamespacedName, verdict{})
		return ctrl.Result{}, err
	}
	orig := obj.DeepCopy()
	v, err := r.decide(ctx, obj)
	if errors.Is(err, errRecreate) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	applyStatus(obj, serverNameOf(obj), v)
	obj.Status.Replica = r.Replica
	r.markReach(obj)
	recordGauges(obj.Namespace, obj.Name, v.snap)
	recordPhase(obj.Namespace, obj.Name, obj.Status.Phase)
	// Nothing watches an object with a Pod-runtime name that we do not
	// own (the caches hold only ours): look again later.
	res = ctrl.Result{}
	switch v.reason {
	case v1alpha1.ReasonPodObjectConflict:
		res.RequeueAfter = podObjectRetry
	case v1alpha1.ReasonHandingOver:
		// The holder's release or its Lease's end reconciles this server
		// (moved); this is the net under a missed event.
		res.RequeueAfter = handOverRetry
	}
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return res, nil
	}
	if wait := r.firstStatusWait(orig, v); wait > 0 {
		// Nothing is written yet: orig, read from the API before the
		// supervisor started, is the base of the next reconcile as the
		// owner's own write would be (cacheIsEnough).
		r.written.wrote(orig)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.written.wrote(obj)
	// Only now: a status read from a cache that was behind would have
	// told of a change that is not one, and the refused patch is retried.
	r.emitEvents(obj, &orig.Status, v)
	return res, nil
}

// firstStatusWait is how much longer the first status of a new McpServer
// waits for its first connection, or 0 to write now. It waits only while
// nothing was ever written and the supervisor this replica started is still
// connecting; a failed attempt, a Ready connection or the end of the wait
// writes. Until then the server has only the CRD's default status
// (observedGeneration -1, or none under a CRD from before that default),
// which kstatus reads as in progress. See docs/design.md, "The first
// status".
func (r *McpServerReconciler) firstStatusWait(orig *v1alpha1.McpServer, v verdict) time.Duration {
	limit := cmp.Or(r.FirstStatusWait, defaultFirstStatusWait)
	if limit < 0 || orig.Status.ObservedGeneration > 0 || orig.Status.Phase != "" || !stillConnecting(v) {
		return 0
	}
	age, running := r.Supervisors.Age(client.ObjectKeyFromObject(orig))
	if !running || age >= limit {
		return 0
	}
	return limit - age
}

// stillConnecting: v is a supervisor's first connection under way, with
// nothing to tell yet. A failed attempt keeps the reason Connecting until
// the server has connected once, and a Pod that cannot start is told as
// the last error: both are written at once.
func stillConnecting(v verdict) bool {
	return v.reason == v1alpha1.ReasonConnecting && v.snap != nil && v.snap.FailedAttempts == 0 && v.snap.LastError == nil
}

// defaultFirstStatusWait: a Streamable HTTP server within reach connects
// well within it, even while a replica starts a thousand at once.
const defaultFirstStatusWait = 2 * time.Second

// cacheIsEnough: the cache's copy of an owned server can be the base of
// this reconcile. It can when the server runs here and the copy is the
// version this replica's last status write returned: only the owner
// writes status, and a replica forgets its record of a server once
// another owns it. A server about to start here is read from the API: its
// connection generation continues from the status, which another replica
// may have written last. See docs/design.md, "Reading what the owner
// writes".
func (r *McpServerReconciler) cacheIsEnough(obj *v1alpha1.McpServer) bool {
	return r.Supervisors.Get(client.ObjectKeyFromObject(obj)) != nil && r.written.seenIn(obj)
}

// read is the McpServer as the cache has it, or as the API has it when the
// cache has none: every replica reconciles every server, and only its owner
// needs the API's (see docs/design.md, "Replicas and ownership").
func (r *McpServerReconciler) read(ctx context.Context, key types.NamespacedName) (*v1alpha1.McpServer, error) {
	obj := &v1alpha1.McpServer{}
	err := r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	return obj, err
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
	p, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, values, r.Runtime)
	var missing *policy.MissingRefError
	switch {
	case errors.As(err, &missing):
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhasePending, reason: v1alpha1.ReasonSecretNotFound,
			message: fmt.Sprintf("Waiting for %s (%s)", missing.Ref, missing.Field)})
	case err != nil:
		return r.halt(ctx, key, verdict{phase: v1alpha1.PhaseInvalid, reason: v1alpha1.ReasonInvalidSpec,
			message: "Invalid spec: " + err.Error()})
	}
	if p.Stdio != nil && r.Replicas != nil {
		if v, ok, err := r.claimConnection(ctx, obj, p); err != nil || !ok {
			return v, err
		}
	}
	if p.Stdio != nil && p.Stdio.Runtime == v1alpha1.RuntimePod {
		return r.runInPod(ctx, obj, p)
	}
	sup, err := r.Supervisors.Ensure(ctx, key, swapKey(obj, p), supervisorOptions(obj, p))
	if err != nil {
		return closeTimeoutVerdict(err)
	}
	// Switched from the Pod runtime: the old server is gone with its
	// supervisor, its Pod goes now.
	if err := r.removePodObjects(ctx, obj.Namespace, obj.Name); err != nil {
		return verdict{}, err
	}
	return r.published(ctx, obj, p, sup)
}

// published is the verdict of a running supervisor, once what it has
// published is in the server's McpToolSet.
func (r *McpServerReconciler) published(ctx context.Context, obj *v1alpha1.McpServer, p *policy.Policy, sup *bridge.Supervisor) (verdict, error) {
	if v, err := r.publish(ctx, obj, p, sup); err != nil || v.phase != "" {
		return v, err
	}
	return r.verdictOf(obj, sup), nil
}

// notOwned is the reconcile of a server that another replica owns, or
// that no replica owns while this one has not joined the replicas yet.
func (r *McpServerReconciler) notOwned(ctx context.Context, obj *v1alpha1.McpServer, owner string) (ctrl.Result, error) {
	if r.Replicas != nil && !r.Replicas.SelfLive() {
		return r.fenced(ctx)
	}
	if owner == "" {
		return ctrl.Result{RequeueAfter: notJoinedRetry}, nil
	}
	err := r.letGo(ctx, obj)
	if errors.Is(err, errRecreate) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// fenced is a replica's part while it is not in its own live set (cut off
// from the apiserver, or not joined yet): a peer it cannot see may start a
// stdio server's child once this replica's Lease has expired for the close
// barrier, whether or not this replica released it. So every stdio child
// it runs is reaped at once, all of them together (one reconcile each,
// MaxConcurrentReconciles at a time, would reap slow children too late),
// calls in flight or not, and nothing is written: the apiserver may be out
// of reach. Streamable HTTP connections stay. See docs/design.md,
// "Fencing".
func (r *McpServerReconciler) fenced(ctx context.Context) (ctrl.Result, error) {
	var wg sync.WaitGroup
	for _, key := range r.Supervisors.Keys() {
		obj := &v1alpha1.McpServer{}
		if err := r.Client.Get(ctx, key, obj); err == nil && obj.Spec.Transport == v1alpha1.TransportStreamableHTTP {
			continue
		}
		wg.Go(func() {
			ctrl.LoggerFrom(ctx).Info("stopping a stdio server at once: this replica is not in its own live set "+
				"(no Lease renewal accepted lately), so another replica may start it", "mcpserver", key.String())
			_ = r.Supervisors.Stop(ctx, key) // one still closing is retried at the next reconcile
			forgetMetrics(key.Namespace, key.Name)
		})
	}
	wg.Wait()
	return ctrl.Result{RequeueAfter: notJoinedRetry}, nil
}

// runInPod runs a Pod-runtime server: the token Secret, then the
// supervisor bound to the Pod template, then the Deployment. The order keeps
// one server process at a time: a new template only reaches the Deployment
// once the previous supervisor has been disposed, its tunnel closed and the
// shim's reap confirmed, and Recreate then replaces the Pod.
// See docs/design.md, "The server's Pod".
func (r *McpServerReconciler) runInPod(ctx context.Context, obj *v1alpha1.McpServer, p *policy.Policy) (verdict, error) {
	key := client.ObjectKeyFromObject(obj)
	if r.pods == nil {
		return verdict{}, errors.New("the McpServer reconciler runs a Pod-runtime server only once SetupWithManager has given it a Pod cache")
	}
	netpol, err := podruntime.NetworkPolicy(obj, r.PodRuntime)
	if err != nil {
		return verdict{}, err
	}
	creds, deploy, err := r.ensureCredentials(ctx, obj, func(token string) (*appsv1.Deployment, error) {
		return podruntime.Deployment(obj, p, token, r.PodRuntime)
	})
	if err != nil {
		return r.podObjectFailure(ctx, key, err)
	}
	hash := templateHashOf(deploy)
	opts := supervisorOptions(obj, p)
	opts.Pod = &bridge.PodTunnel{Pods: r.pods.Source(obj.Namespace, obj.Name, hash), Token: creds.Token, Cert: creds.Cert,
		Port: int(r.PodRuntime.Port)}
	// The hash is keyed by the token: new credentials are a new supervisor too.
	k := swapKey(obj, p)
	k.Connection += "/" + hash
	sup, err := r.Supervisors.Ensure(ctx, key, k, opts)
	if err != nil {
		return closeTimeoutVerdict(err)
	}
	if err := r.applyNetworkPolicy(ctx, obj, netpol); err != nil {
		return r.podObjectFailure(ctx, key, err)
	}
	if sup.Sleeping() {
		// Asleep: no Pod until a call wakes the server, which signals
		// and brings this reconcile back. See docs/design.md, "Idle servers".
		deploy.Spec.Replicas = ptr.To[int32](0)
	}
	if err := r.applyDeployment(ctx, obj, deploy); err != nil {
		return r.podObjectFailure(ctx, key, err)
	}
	return r.published(ctx, obj, p, sup)
}

// podObjectFailure stops the server when an object of its Pod runtime
// cannot be had: Conflict while another owner's object holds the name.
func (r *McpServerReconciler) podObjectFailure(ctx context.Context, key client.ObjectKey, err error) (verdict, error) {
	var foreign *foreignObjectError
	if !errors.As(err, &foreign) {
		return verdict{}, err
	}
	return r.halt(ctx, key, verdict{phase: v1alpha1.PhaseConflict, reason: v1alpha1.ReasonPodObjectConflict, message: foreign.Error()})
}

// supervisorOptions leaves Log to Supervisors: the reconcile's logger names
// the reconcile that started the supervisor, not the lines it logs later,
// and keeping it would keep its encoder (about 1 KiB with zap) for the
// supervisor's life (docs/design.md, "Replicas and ownership": memory).
func supervisorOptions(obj *v1alpha1.McpServer, p *policy.Policy) bridge.Options {
	return bridge.Options{
		Namespace: obj.Namespace, Name: obj.Name, Policy: p,
		BaseGeneration: obj.Status.ConnectionGeneration,
		Observer:       observer{ns: obj.Namespace, name: obj.Name},
	}
}

// closeTimeoutVerdict: the previous supervisor's server outlived its close
// barrier, so no second one starts until it is gone; Supervisors
// reconciles the resource again then. Any other error is returned.
func closeTimeoutVerdict(err error) (verdict, error) {
	if errors.Is(err, bridge.ErrCloseTimeout) {
		return verdict{phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonCloseTimeout,
			message: "The previous connection did not close within its close barrier; the new one starts once it has"}, nil
	}
	return verdict{}, err
}

func (r *McpServerReconciler) verdictOf(obj *v1alpha1.McpServer, sup *bridge.Supervisor) verdict {
	v := verdictFromSnapshot(sup.Snapshot())
	r.emitSupervisorEvents(obj, sup)
	return v
}

// halt stops the supervisor (its tools leave the registry), then removes
// the objects of its Pod runtime, if any, and returns v.
func (r *McpServerReconciler) halt(ctx context.Context, key client.ObjectKey, v verdict) (verdict, error) {
	if err := stopped(r.Supervisors.Stop(ctx, key)); err != nil {
		return v, err
	}
	if err := r.dropToolSet(ctx, key); err != nil {
		return v, err
	}
	return v, r.removePodObjects(ctx, key.Namespace, key.Name)
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
		// Applied in place as well: see docs/design.md, "Idle servers".
		SuspendAfter: p.SuspendAfter,
	}
}

// notJoinedRetry is how soon a replica that has not joined the replicas
// yet looks again at a server; joining reconciles its share anyway.
const notJoinedRetry = time.Second

// conflictRetry is how soon a status write that lost a race is retried.
const conflictRetry = 50 * time.Millisecond

// handOverRetry is how often a server whose stdio connection another live
// replica still holds looks again.
const handOverRetry = 2 * time.Second

// podObjectRetry is how often a server whose Deployment or token Secret
// name is taken by someone else's object checks whether it is gone.
const podObjectRetry = 30 * time.Second
