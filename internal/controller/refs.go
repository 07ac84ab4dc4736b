package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// indexRefs indexes McpServers by the Secrets and ConfigMaps they read, as
// "Secret/<name>" and "ConfigMap/<name>", so that a change of one of those
// objects reaches exactly the resources that use it.
const indexRefs = "mcpbridge.dev/refs"

func refKey(kind policy.RefKind, name string) string { return string(kind) + "/" + name }

func indexRefsFunc(obj client.Object) []string {
	m, ok := obj.(*v1alpha1.McpServer)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var keys []string
	for _, r := range policy.Refs(&m.Spec) {
		if k := refKey(r.Kind, r.Name); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// readValues reads every referenced key with the uncached reader: Secret
// data is never held in an informer cache. An object or key that does not
// exist is simply absent from the result.
func readValues(ctx context.Context, r client.Reader, ns string, refs []policy.Ref) (policy.Values, error) {
	vals := policy.Values{}
	secrets := map[string]*corev1.Secret{}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, ref := range refs {
		key := types.NamespacedName{Namespace: ns, Name: ref.Name}
		switch ref.Kind {
		case policy.SecretRef:
			s, err := getCached(ctx, r, key, secrets, &corev1.Secret{})
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			if v, ok := s.Data[ref.Key]; ok {
				vals[ref] = string(v)
			}
		case policy.ConfigMapRef:
			cm, err := getCached(ctx, r, key, configMaps, &corev1.ConfigMap{})
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue
			}
			if v, ok := cm.Data[ref.Key]; ok {
				vals[ref] = v
			} else if b, ok := cm.BinaryData[ref.Key]; ok {
				vals[ref] = string(b)
			}
		}
	}
	return vals, nil
}

// getCached gets an object once per reconcile; nil when it does not exist.
func getCached[T client.Object](ctx context.Context, r client.Reader, key types.NamespacedName, seen map[string]T, obj T) (T, error) {
	if o, ok := seen[key.Name]; ok {
		return o, nil
	}
	var zero T
	if err := r.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			seen[key.Name] = zero
			return zero, nil
		}
		// The error names the object, never its data.
		return zero, fmt.Errorf("read %s: %w", key, err)
	}
	seen[key.Name] = obj
	return obj, nil
}

// mapRefHolders turns an event on a Secret or ConfigMap into requests for
// the McpServers that reference it.
func mapRefHolders(c client.Reader, kind policy.RefKind) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &v1alpha1.McpServerList{}
		if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace()),
			client.MatchingFields{indexRefs: refKey(kind, obj.GetName())}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
}

// mapSecretUsers turns an event on a Secret into requests for the
// McpServers that reference it and for the one that owns it (a token
// Secret deleted by hand is created again, with a new token).
func mapSecretUsers(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	holders := mapRefHolders(c, policy.SecretRef)
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := holders(ctx, obj)
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ownedByServer(obj, ref.Name) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}})
		}
		return reqs
	}
}
