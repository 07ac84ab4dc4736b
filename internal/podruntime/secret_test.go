package podruntime_test

import (
	"crypto/tls"
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/internal/podruntime"
)

func TestTokenSecret(t *testing.T) {
	obj := server()
	creds, err := podruntime.NewCredentials(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := podruntime.TokenSecret(obj, creds, "abc")
	if s.Name != "github-mcp-token" || s.Namespace != "agents" {
		t.Errorf("Secret %s/%s, want agents/github-mcp-token", s.Namespace, s.Name)
	}
	if s.APIVersion != "v1" || s.Kind != "Secret" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("apiVersion %q kind %q type %q", s.APIVersion, s.Kind, s.Type)
	}
	if len(s.Data) != 3 || string(s.Data[podruntime.TokenKey]) != creds.Token || podruntime.TokenKey != "token" ||
		string(s.Data["tls.crt"]) != string(creds.Cert) || string(s.Data["tls.key"]) != string(creds.Key) {
		t.Errorf("data keys %d, want token, tls.crt and tls.key", len(s.Data))
	}
	if s.Annotations[podruntime.IssuedForAnnotation] != "abc" || len(s.Annotations) != 1 {
		t.Errorf("annotations %v, want the template hash the credentials were issued for", s.Annotations)
	}
	if s.Labels["app.kubernetes.io/managed-by"] != "mcpbridge" || s.Labels["mcpbridge.dev/server"] != "github" || len(s.Labels) != 2 {
		t.Errorf("labels %v", s.Labels)
	}
	if len(s.OwnerReferences) != 1 {
		t.Fatalf("ownerReferences %v", s.OwnerReferences)
	}
	o := s.OwnerReferences[0]
	if o.Kind != "McpServer" || o.APIVersion != "mcpbridge.dev/v1alpha1" || o.Name != "github" || o.UID != obj.UID ||
		!ptr.Deref(o.Controller, false) || !ptr.Deref(o.BlockOwnerDeletion, false) {
		t.Errorf("ownerReference %+v", o)
	}
	// The Deployment mounts exactly this Secret's keys where the shim's
	// flags read them.
	d := render(t, obj)
	vol := d.Spec.Template.Spec.Volumes[2].Secret
	if vol.SecretName != s.Name || len(vol.Items) != 3 {
		t.Fatalf("the Deployment mounts %s items %v", vol.SecretName, vol.Items)
	}
	for i, path := range []string{podruntime.TokenPath, podruntime.CertPath, podruntime.PrivateKeyPath} {
		if _, ok := s.Data[vol.Items[i].Key]; !ok || podruntime.TokenDir+"/"+vol.Items[i].Path != path {
			t.Errorf("item %d %+v is not the Secret's key at %s", i, vol.Items[i], path)
		}
		if !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Command, " "), "="+path+" ") {
			t.Errorf("the shim's command line does not read %s", path)
		}
	}
	if got, err := podruntime.CredentialsOf(s); err != nil || got.Token != creds.Token {
		t.Errorf("CredentialsOf: %v", err)
	}
}

func TestNewCredentialsAreFreshKeyPairs(t *testing.T) {
	obj := server()
	a, err := podruntime.NewCredentials(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := podruntime.NewCredentials(obj)
	if a.Token == b.Token || string(a.Cert) == string(b.Cert) || string(a.Key) == string(b.Key) {
		t.Error("two issues share a token, a certificate or a key")
	}
	pair, err := tls.X509KeyPair(a.Cert, a.Key)
	if err != nil {
		t.Fatalf("not a key pair: %v", err)
	}
	if pair.Leaf == nil || pair.Leaf.Subject.CommonName != "mcpbridge shim agents/github" {
		t.Errorf("certificate %+v", pair.Leaf)
	}
}

func TestCredentialsOfRefusesIncompleteSecrets(t *testing.T) {
	obj := server()
	a, _ := podruntime.NewCredentials(obj)
	b, _ := podruntime.NewCredentials(obj)
	for _, tc := range []struct {
		name string
		data map[string][]byte
		want string
	}{
		{"empty", nil, "no token"},
		{"a token only, as before the tunnel had TLS", map[string][]byte{"token": []byte(a.Token)}, "no tls.crt or tls.key"},
		{"key of another certificate", map[string][]byte{"token": []byte(a.Token), "tls.crt": a.Cert, "tls.key": b.Key}, "not a key pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := podruntime.CredentialsOf(&corev1.Secret{Data: tc.data})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), a.Token) || strings.Contains(err.Error(), "PRIVATE") {
				t.Errorf("the error quotes the Secret: %v", err)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := podruntime.NewToken()
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) != 32 || len(tok) != 43 {
			t.Fatalf("token %q: %d bytes, err %v; want 32 bytes in 43 base64url characters", tok, len(b), err)
		}
		if seen[tok] {
			t.Fatalf("token %q twice", tok)
		}
		seen[tok] = true
	}
}
