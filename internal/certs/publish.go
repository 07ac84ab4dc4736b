package certs

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// CAConfigMapKey is the key of the CA's certificate (PEM) in a published
// ConfigMap, as in kube-root-ca.crt.
const CAConfigMapKey = "ca.crt"

// Publisher writes the CA's certificate as CAConfigMapKey in a ConfigMap
// named Name in every namespace of Namespaces (every namespace of the
// cluster when empty), and puts it back when it is edited or deleted.
// Reconcile requests are namespaces.
type Publisher struct {
	// Reader reads ConfigMaps from the apiserver (the manager caches only
	// their metadata).
	Reader client.Reader
	Client client.Client
	Name   string
	// Labels go on every ConfigMap written.
	Labels map[string]string
	// Namespaces are the watched namespaces; empty watches Namespaces.
	Namespaces []string
	// CA returns the CA to publish; nil before there is one.
	CA func() *CA

	changed chan event.TypedGenericEvent[reconcile.Request]
}

// SetupWithManager registers the publisher: it reconciles each watched
// namespace at start, on a change of its ConfigMap and whenever CAChanged
// is called.
func (p *Publisher) SetupWithManager(mgr ctrl.Manager) error {
	p.changed = make(chan event.TypedGenericEvent[reconcile.Request], 1)
	b := ctrl.NewControllerManagedBy(mgr).Named("gateway-ca-publisher").
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(namespaceOf),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == p.Name }))).
		WatchesRawSource(source.Channel(p.changed, handler.TypedEnqueueRequestsFromMapFunc(p.all)))
	if len(p.Namespaces) == 0 {
		b = b.WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		}))
	} else {
		b = b.WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			for _, ns := range p.Namespaces {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}})
			}
			return nil
		}))
	}
	return b.Complete(p)
}

// CAChanged asks for every namespace's ConfigMap to be brought up to date;
// it never blocks (one pending request covers all).
func (p *Publisher) CAChanged(*CA) {
	if p.changed == nil {
		return
	}
	select {
	case p.changed <- event.TypedGenericEvent[reconcile.Request]{}:
	default:
	}
}

// all maps a CA change to every namespace.
func (p *Publisher) all(ctx context.Context, _ reconcile.Request) []reconcile.Request {
	names := p.Namespaces
	if len(names) == 0 {
		var list metav1.PartialObjectMetadataList
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
		if err := p.Client.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "cannot list namespaces to publish the gateway CA")
			return nil
		}
		for _, ns := range list.Items {
			names = append(names, ns.Name)
		}
	}
	reqs := make([]reconcile.Request, len(names))
	for i, ns := range names {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}}
	}
	return reqs
}

func namespaceOf(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
}

// Reconcile makes namespace req.Name's ConfigMap hold the current CA.
func (p *Publisher) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ca := p.CA()
	if ca == nil {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	key := types.NamespacedName{Namespace: req.Name, Name: p.Name}
	var cm corev1.ConfigMap
	err := p.Reader.Get(ctx, key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: p.Labels},
			Data: map[string]string{CAConfigMapKey: string(ca.CertPEM)}}
		err = p.Client.Create(ctx, &cm)
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) && isTerminating(err) {
			return reconcile.Result{}, nil // the namespace is gone or going
		}
		return reconcile.Result{}, ignoreExists(err, key)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("read ConfigMap %s: %w", key, err)
	}
	if cm.Data[CAConfigMapKey] == string(ca.CertPEM) && len(cm.Data) == 1 {
		return reconcile.Result{}, nil
	}
	cm.Data = map[string]string{CAConfigMapKey: string(ca.CertPEM)}
	if err := p.Client.Update(ctx, &cm); err != nil {
		return reconcile.Result{}, fmt.Errorf("update ConfigMap %s: %w", key, err)
	}
	return reconcile.Result{}, nil
}

// ignoreExists: a create that raced another writer is retried by the
// event that writer's ConfigMap causes.
func ignoreExists(err error, key types.NamespacedName) error {
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return fmt.Errorf("create ConfigMap %s: %w", key, err)
}

// isTerminating: creating in a namespace being deleted is forbidden.
func isTerminating(err error) bool {
	return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
