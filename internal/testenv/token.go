package testenv

import (
	"context"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountToken asks c's apiserver for a token of the ServiceAccount
// ns/name for audiences, valid for ttl: what a Pod's projected token would
// be, for the agents of benchmarks.
func ServiceAccountToken(ctx context.Context, c client.Client, ns, name string, ttl time.Duration, audiences ...string) (string, error) {
	seconds := int64(ttl / time.Second)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
