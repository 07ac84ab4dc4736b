package controller

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
)

// CacheOptions adds to base what the reconciler needs of the manager's
// cache: Deployments, Pods and NetworkPolicies only with the label the manager puts on the
// objects of the Pod runtime, so that the manager never caches the
// cluster's other Pods, Deployments and NetworkPolicies; and every cached
// object stripped of what the manager never reads (StripUnread), an
// McpServer whose status another replica writes of that status's lists
// (StripOthersStatus). replica is this replica's name. The manager must be
// built with it. See docs/design.md, "Pods that are not there yet",
// "Limits" and "Replicas and ownership" (memory).
func CacheOptions(base cache.Options, replica string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{podruntime.ManagedByLabel: podruntime.ManagedByValue})}
	byObject := make(map[client.Object]cache.ByObject, len(base.ByObject)+2)
	for k, v := range base.ByObject {
		byObject[k] = v
	}
	byObject[&appsv1.Deployment{}] = managed
	byObject[&corev1.Pod{}] = managed
	byObject[&networkingv1.NetworkPolicy{}] = managed
	base.ByObject = byObject
	base.DefaultTransform = chain(chain(base.DefaultTransform, StripUnread), StripOthersStatus(replica))
	return base
}

// StripOthersStatus is the cache's transform for an McpServer whose status
// names another replica as its writer: it drops the status's tools, server
// info, last error, times and conditions, about 1.5 KB a server that only
// the owner reads. Every replica caches every server, and a replica owns a
// share of them. A replica never computes a status from such a copy: it
// reads a server from the apiserver before it starts it, and from the cache
// only the version its own last write returned (docs/design.md, "Reading
// what the owner writes"); its own writes name it, so they stay whole.
// The spec and the status's scalars (the owner's name, phase, generations)
// stay.
func StripOthersStatus(replica string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(*v1alpha1.McpServer)
		if !ok || m.Status.Replica == "" || m.Status.Replica == replica {
			return obj, nil
		}
		s := &m.Status
		s.Tools, s.ServerInfo, s.LastError, s.Conditions = nil, nil, nil, nil
		s.LastConnectedTime, s.NextRetryTime = nil, nil
		return obj, nil
	}
}

// readAnnotations are the only annotations the manager reads of a cached
// object: an McpServer's restartedAt and a Pod's template hash.
var readAnnotations = [...]string{v1alpha1.RestartedAtAnnotation, podruntime.TemplateHashAnnotation}

// StripUnread is the cache's transform: it drops an object's managedFields
// and every annotation the manager does not read, before the informer
// stores it, so that a tenant's large annotations (or the managedFields
// that every writer adds) cost the manager no memory. Objects read from the
// cache are therefore never written back whole (applyOwned patches).
// It mutates obj, as transforms may; anything without object metadata (a
// tombstone) passes unchanged.
func StripUnread(obj any) (any, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	o.SetManagedFields(nil)
	if a := o.GetAnnotations(); len(a) > 0 && hasUnread(a) {
		o.SetAnnotations(keepRead(a))
	}
	return obj, nil
}

func hasUnread(a map[string]string) bool {
	for k := range a {
		if !isRead(k) {
			return true
		}
	}
	return false
}

func isRead(key string) bool { return slices.Contains(readAnnotations[:], key) }

// keepRead is a copy of the read annotations only, or nil.
func keepRead(a map[string]string) map[string]string {
	var out map[string]string
	for _, k := range readAnnotations {
		if v, ok := a[k]; ok {
			if out == nil {
				out = make(map[string]string, len(readAnnotations))
			}
			out[k] = v
		}
	}
	return out
}

// chain runs first (when set), then then.
func chain(first, then toolscache.TransformFunc) toolscache.TransformFunc {
	if first == nil {
		return then
	}
	return func(obj any) (any, error) {
		obj, err := first(obj)
		if err != nil {
			return nil, err
		}
		return then(obj)
	}
}
