package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/podruntime"
)

// CacheOptions adds to base what the reconciler needs of the manager's
// cache: Deployments, Pods and NetworkPolicies only with the label the manager puts on the
// objects of the Pod runtime, so that the manager never caches the
// cluster's other Pods, Deployments and NetworkPolicies. The manager must be built with it.
// See docs/design.md, "Pods that are not there yet".
func CacheOptions(base cache.Options) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{podruntime.ManagedByLabel: podruntime.ManagedByValue})}
	byObject := make(map[client.Object]cache.ByObject, len(base.ByObject)+2)
	for k, v := range base.ByObject {
		byObject[k] = v
	}
	byObject[&appsv1.Deployment{}] = managed
	byObject[&corev1.Pod{}] = managed
	byObject[&networkingv1.NetworkPolicy{}] = managed
	base.ByObject = byObject
	return base
}
