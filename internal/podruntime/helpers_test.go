package podruntime_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// Values the rendered objects must never hold.
const (
	secretValue    = "resolved-secret-value-3d9f"
	configMapValue = "resolved-configmap-value-8a1c"
	testToken      = "tunnel-token-for-tests"
	shimImage      = "ghcr.io/mcpbridge/operator:v1"
)

// server is an McpServer "github" in "agents" whose spec runs npx with env
// from a literal, a Secret and a ConfigMap, changed by mods.
func server(mods ...func(*v1alpha1.McpServer)) *v1alpha1.McpServer {
	obj := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Name: "github", Namespace: "agents", UID: types.UID("6f1e2d3c-uid")},
		Spec: v1alpha1.McpServerSpec{
			Transport: v1alpha1.TransportStdio,
			Stdio: &v1alpha1.StdioTransport{
				Command: "npx",
				Args:    []string{"-y", "@modelcontextprotocol/server-github"},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "debug"},
					{Name: "GITHUB_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "github"}, Key: "token"}}},
					{Name: "REGION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "region"}}},
				},
			},
		},
	}
	for _, m := range mods {
		m(obj)
	}
	return obj
}

func values() policy.Values {
	return policy.Values{
		{Kind: policy.SecretRef, Name: "github", Key: "token"}:       secretValue,
		{Kind: policy.ConfigMapRef, Name: "settings", Key: "region"}: configMapValue,
	}
}

// resolve is obj's policy on a cluster without the Local runtime.
func resolve(t *testing.T, obj *v1alpha1.McpServer, vals policy.Values) *policy.Policy {
	t.Helper()
	p, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, vals, policy.RuntimeConfig{})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return p
}

func opts() podruntime.Options { return podruntime.Options{ShimImage: shimImage} }

// render is the Deployment of obj with the test's values, token and options.
func render(t *testing.T, obj *v1alpha1.McpServer) *appsv1.Deployment {
	t.Helper()
	d, err := podruntime.Deployment(obj, resolve(t, obj, values()), testToken, opts())
	if err != nil {
		t.Fatalf("Deployment: %v", err)
	}
	return d
}
