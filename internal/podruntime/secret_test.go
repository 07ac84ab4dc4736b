package podruntime_test

import (
	"encoding/base64"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/internal/podruntime"
)

func TestTokenSecret(t *testing.T) {
	obj := server()
	s := podruntime.TokenSecret(obj, "tok")
	if s.Name != "github-mcp-token" || s.Namespace != "agents" {
		t.Errorf("Secret %s/%s, want agents/github-mcp-token", s.Namespace, s.Name)
	}
	if s.APIVersion != "v1" || s.Kind != "Secret" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("apiVersion %q kind %q type %q", s.APIVersion, s.Kind, s.Type)
	}
	if len(s.Data) != 1 || string(s.Data[podruntime.TokenKey]) != "tok" || podruntime.TokenKey != "token" {
		t.Errorf("data %v, want only token=tok", s.Data)
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
	// The Deployment mounts exactly this Secret's key.
	d := render(t, obj)
	vol := d.Spec.Template.Spec.Volumes[2].Secret
	if vol.SecretName != s.Name || vol.Items[0].Key != podruntime.TokenKey || podruntime.TokenPath != "/mcpbridge/token/token" {
		t.Errorf("the Deployment mounts %s key %s at %s", vol.SecretName, vol.Items[0].Key, podruntime.TokenPath)
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
