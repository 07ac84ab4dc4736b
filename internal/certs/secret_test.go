package certs

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var caKey = client.ObjectKey{Namespace: "ops", Name: "gateway-ca"}

func caSecret(c client.Client) *CASecret {
	return &CASecret{Reader: c, Writer: c, Key: caKey, CommonName: "test CA", Validity: time.Hour,
		Labels: map[string]string{"app.kubernetes.io/component": "gateway-ca"}}
}

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCASecretCreatesThenReuses: the first Load creates the Secret, every
// later one returns the same CA.
func TestCASecretCreatesThenReuses(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).Build()
	first, err := caSecret(c).Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := c.Get(context.Background(), caKey, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeOpaque || s.Labels["app.kubernetes.io/component"] != "gateway-ca" {
		t.Errorf("Secret type %q labels %v", s.Type, s.Labels)
	}
	again, err := caSecret(c).Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(first.Cert) {
		t.Fatal("a second Load made another CA")
	}
}

// TestCASecretRaceReadsTheWinner: a replica that saw no Secret but lost the
// create (AlreadyExists) serves the winner's CA, not the one it made.
func TestCASecretRaceReadsTheWinner(t *testing.T) {
	winner, err := NewCA("winner", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	won := &corev1.Secret{ObjectMeta: caMeta(), Data: map[string][]byte{corev1.TLSCertKey: winner.CertPEM, corev1.TLSPrivateKeyKey: winner.KeyPEM}}
	gets := 0
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(won).WithInterceptorFuncs(interceptor.Funcs{
		// The first read comes before the winner's create.
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			if gets == 1 {
				return c.Get(ctx, client.ObjectKey{Namespace: "elsewhere", Name: key.Name}, obj, opts...)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	got, err := caSecret(c).Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(winner.Cert) {
		t.Fatalf("served CA %q, want the winner's", got.Cert.Subject.CommonName)
	}
}

// TestCASecretThatIsNoCAIsAnError: a damaged Secret is reported, never
// overwritten.
func TestCASecretThatIsNoCAIsAnError(t *testing.T) {
	bad := &corev1.Secret{ObjectMeta: caMeta(), Data: map[string][]byte{corev1.TLSCertKey: []byte("junk")}}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(bad).Build()
	if _, err := caSecret(c).Load(context.Background(), time.Now()); err == nil {
		t.Fatal("a Secret without a CA was accepted")
	}
	var s corev1.Secret
	if err := c.Get(context.Background(), caKey, &s); err != nil || string(s.Data[corev1.TLSCertKey]) != "junk" {
		t.Fatalf("the Secret was changed: %v", err)
	}
}

func caMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: caKey.Namespace, Name: caKey.Name}
}
