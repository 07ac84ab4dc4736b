package certs

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CASecret is where a CA is kept: a kubernetes.io/tls-shaped Opaque Secret
// (tls.crt, tls.key) that the manager creates when absent and never
// changes afterwards. Deleting it makes the manager issue a new CA at its
// next rotation.
type CASecret struct {
	// Reader reads the Secret from the apiserver (not from a cache: the
	// manager caches no Secret of its own namespace).
	Reader client.Reader
	// Writer creates it.
	Writer client.Writer
	Key    client.ObjectKey
	// CommonName and Validity are the new CA's, when there is none.
	CommonName string
	Validity   time.Duration
	// Labels go on a Secret this creates.
	Labels map[string]string
}

// Load returns the CA the Secret holds, creating it first when there is no
// Secret. A create that another replica won (AlreadyExists) reads that
// replica's CA, so that all serve certificates of one CA.
func (s *CASecret) Load(ctx context.Context, now time.Time) (*CA, error) {
	ca, err := s.get(ctx)
	if !apierrors.IsNotFound(err) {
		return ca, err
	}
	ca, err = NewCA(s.CommonName, s.Validity, now)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Key.Namespace, Name: s.Key.Name, Labels: s.Labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM},
	}
	err = s.Writer.Create(ctx, secret)
	switch {
	case err == nil:
		return ca, nil
	case apierrors.IsAlreadyExists(err):
		return s.get(ctx)
	default:
		return nil, fmt.Errorf("create the CA Secret %s: %w", s.Key, err)
	}
}

// get reads and parses the Secret; a NotFound error is returned as is.
func (s *CASecret) get(ctx context.Context) (*CA, error) {
	var secret corev1.Secret
	if err := s.Reader.Get(ctx, s.Key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("read the CA Secret %s: %w", s.Key, err)
	}
	ca, err := ParseCA(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %s: %w", s.Key, err)
	}
	return ca, nil
}
