package egress

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeOwners looks an address up in the apiserver: the Pods whose
// status.podIP and the Services whose spec.clusterIP it is, in every
// namespace, through field-selected Lists. Reader should be uncached
// (the manager's APIReader): the manager caches neither all Pods nor all
// Services of the cluster, and a dial is rare next to the calls it serves.
// It needs list on Pods and Services in every namespace (the RBAC markers
// are internal/controller's, where the manager's rules are generated).
type KubeOwners struct {
	Reader client.Reader
}

// Owners implements Owners. A Pod that has ended (Succeeded, Failed) no
// longer has its address: the address may already be another Pod's.
func (k KubeOwners) Owners(ctx context.Context, a netip.Addr) ([]Owner, error) {
	ip := a.WithZone("").Unmap().String()
	var out []Owner
	pods := &corev1.PodList{}
	if err := k.Reader.List(ctx, pods, client.MatchingFields{"status.podIP": ip}); err != nil {
		return nil, fmt.Errorf("list the Pods with that address: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, Owner{Kind: "Pod", Namespace: p.Namespace, Name: p.Name})
	}
	svcs, err := k.services(ctx, ip)
	if err != nil {
		return nil, fmt.Errorf("list the Services with that address: %w", err)
	}
	for _, s := range svcs {
		out = append(out, Owner{Kind: "Service", Namespace: s.Namespace, Name: s.Name})
	}
	return out, nil
}

// services are the Services whose spec.clusterIP is ip. An apiserver older
// than the spec.clusterIP field selector (Kubernetes 1.31) refuses it as a
// bad request; then every Service is listed and filtered here.
func (k KubeOwners) services(ctx context.Context, ip string) ([]corev1.Service, error) {
	list := &corev1.ServiceList{}
	err := k.Reader.List(ctx, list, client.MatchingFields{"spec.clusterIP": ip})
	if err == nil || !apierrors.IsBadRequest(err) {
		return list.Items, err
	}
	if err := k.Reader.List(ctx, list); err != nil {
		return nil, err
	}
	var out []corev1.Service
	for _, s := range list.Items {
		if s.Spec.ClusterIP == ip {
			out = append(out, s)
		}
	}
	return out, nil
}
