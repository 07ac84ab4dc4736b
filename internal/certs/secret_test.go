package certs

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/mcpbridge/operator/internal/testenv"
)

// env is a real apiserver: whether a create loses to another replica's
// (AlreadyExists) is the apiserver's answer, not a fake's.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(runWithControlPlane(m)) }

func runWithControlPlane(m *testing.M) int {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	return m.Run()
}

// caKeyIn names the CA Secret in a namespace of the test's own.
func caKeyIn(t *testing.T) client.ObjectKey {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKey{Namespace: ns.Name, Name: "gateway-ca"}
}

func caSecret(c client.Client, key client.ObjectKey) *CASecret {
	return &CASecret{Reader: c, Writer: c, Key: key, CommonName: "test CA", Validity: time.Hour,
		Labels: map[string]string{"app.kubernetes.io/component": "gateway-ca"}}
}

// TestCASecretCreatesThenReuses: the first Load creates the Secret, every
// later one returns the same CA.
func TestCASecretCreatesThenReuses(t *testing.T) {
	key := caKeyIn(t)
	first, err := caSecret(env.Client, key).Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeOpaque || s.Labels["app.kubernetes.io/component"] != "gateway-ca" {
		t.Errorf("Secret type %q labels %v", s.Type, s.Labels)
	}
	again, err := caSecret(env.Client, key).Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(first.Cert) {
		t.Fatal("a second Load made another CA")
	}
}

// TestCASecretRaceReadsTheWinner: a replica that saw no Secret but lost the
// create (AlreadyExists, from the apiserver) serves the winner's CA, not the
// one it made.
func TestCASecretRaceReadsTheWinner(t *testing.T) {
	key := caKeyIn(t)
	winner, err := NewCA("winner", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	won := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Data: map[string][]byte{corev1.TLSCertKey: winner.CertPEM, corev1.TLSPrivateKeyKey: winner.KeyPEM}}
	if err := env.Client.Create(context.Background(), won); err != nil {
		t.Fatal(err)
	}
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	gets := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		// The first read comes before the winner's create.
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if gets++; gets == 1 {
				return apierrors.NewNotFound(corev1.Resource("secrets"), k.Name)
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
	got, err := caSecret(c, key).Load(context.Background(), time.Now())
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
	key := caKeyIn(t)
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Data: map[string][]byte{corev1.TLSCertKey: []byte("junk")}}
	if err := env.Client.Create(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	if _, err := caSecret(env.Client, key).Load(context.Background(), time.Now()); err == nil {
		t.Fatal("a Secret without a CA was accepted")
	}
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), key, &s); err != nil || string(s.Data[corev1.TLSCertKey]) != "junk" {
		t.Fatalf("the Secret was changed: %v", err)
	}
}
