package podruntime_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// hashOf renders obj with vals, token and opts and returns the template hash.
func hashOf(t *testing.T, obj *v1alpha1.McpServer, vals policy.Values, token string, o podruntime.Options) string {
	t.Helper()
	d, err := podruntime.Deployment(obj, resolve(t, obj, vals), token, o)
	if err != nil {
		t.Fatalf("Deployment: %v", err)
	}
	return d.Spec.Template.Annotations[podruntime.TemplateHashAnnotation]
}

func TestTemplateHash(t *testing.T) {
	base := hashOf(t, server(), values(), testToken, opts())
	withValue := func(ref policy.Ref, v string) policy.Values {
		vals := values()
		vals[ref] = v
		return vals
	}
	stdio := func(m func(*v1alpha1.StdioTransport)) *v1alpha1.McpServer { return server(withStdio(m)) }
	spec := func(m func(*v1alpha1.McpServerSpec)) *v1alpha1.McpServer {
		return server(func(o *v1alpha1.McpServer) { m(&o.Spec) })
	}

	for _, tc := range []struct {
		name  string
		obj   *v1alpha1.McpServer
		vals  policy.Values
		token string
		opts  func(*podruntime.Options)
		rolls bool
	}{
		// Everything that reaches the Pod rolls it.
		{name: "image", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.Image = "ghcr.io/org/srv:2" })},
		{name: "image pull policy", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.ImagePullPolicy = corev1.PullAlways })},
		{name: "command", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.Command = "node" })},
		{name: "an arg", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.Args[1] += "@2" })},
		{name: "cwd", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.Cwd = "/work" })},
		{name: "a literal env value", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.Env[0].Value = "info" })},
		{name: "an env reference to another Secret", rolls: true,
			obj:  stdio(func(s *v1alpha1.StdioTransport) { s.Env[1].ValueFrom.SecretKeyRef.Name = "github-2" }),
			vals: withValue(policy.Ref{Kind: policy.SecretRef, Name: "github-2", Key: "token"}, secretValue)},
		{name: "a rotated Secret value", rolls: true, obj: server(),
			vals: withValue(policy.Ref{Kind: policy.SecretRef, Name: "github", Key: "token"}, secretValue+"-rotated")},
		{name: "a changed ConfigMap value", rolls: true, obj: server(),
			vals: withValue(policy.Ref{Kind: policy.ConfigMapRef, Name: "settings", Key: "region"}, "eu-west-1")},
		{name: "resources", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) {
			s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"memory": resource.MustParse("1Gi")}}
		})},
		{name: "service account", rolls: true, obj: stdio(func(s *v1alpha1.StdioTransport) { s.ServiceAccountName = "runner" })},
		{name: "the tunnel token", rolls: true, obj: server(), token: testToken + "-new"},
		{name: "the shim image", rolls: true, obj: server(), opts: func(o *podruntime.Options) { o.ShimImage += "-2" }},
		{name: "the shim port", rolls: true, obj: server(), opts: func(o *podruntime.Options) { o.Port = 9000 }},
		{name: "the terminate grace", rolls: true, obj: server(), opts: func(o *podruntime.Options) { o.TerminateGrace = 2 * time.Second }},

		// What only the connection uses hot-swaps it and keeps the Pod.
		{name: "the same inputs again", obj: server()},
		{name: "toolCallTimeoutMs", obj: spec(func(s *v1alpha1.McpServerSpec) { s.ToolCallTimeoutMs = ptr.To[int32](5) })},
		{name: "connectionTimeoutMs", obj: spec(func(s *v1alpha1.McpServerSpec) { s.ConnectionTimeoutMs = ptr.To[int32](5) })},
		{name: "healthCheckIntervalMs", obj: spec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](0) })},
		{name: "reconnect", obj: spec(func(s *v1alpha1.McpServerSpec) {
			s.Reconnect = &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](3)}
		})},
		{name: "serverName", obj: spec(func(s *v1alpha1.McpServerSpec) { s.ServerName = "gh" })},
		{name: "the McpServer's labels, annotations and generation", obj: server(func(o *v1alpha1.McpServer) {
			o.Labels = map[string]string{"team": "a"}
			o.Annotations = map[string]string{v1alpha1.RestartedAtAnnotation: "now"}
			o.Generation = 7
		})},
		{name: "a value no env entry references", obj: server(),
			vals: withValue(policy.Ref{Kind: policy.SecretRef, Name: "unrelated", Key: "k"}, "x")},
		{name: "the options spelled out as their defaults", obj: server(), opts: func(o *podruntime.Options) {
			o.Port, o.TerminateGrace, o.ShimImagePullPolicy = podruntime.ShimPort, podruntime.DefaultTerminateGrace, corev1.PullIfNotPresent
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, token, o := tc.vals, tc.token, opts()
			if vals == nil {
				vals = values()
			}
			if token == "" {
				token = testToken
			}
			if tc.opts != nil {
				tc.opts(&o)
			}
			got := hashOf(t, tc.obj, vals, token, o)
			if rolled := got != base; rolled != tc.rolls {
				t.Errorf("the template hash changed = %v, want %v (%s vs %s)", rolled, tc.rolls, got, base)
			}
		})
	}

	t.Run("stable across renderings", func(t *testing.T) {
		for range 50 {
			if got := hashOf(t, server(), values(), testToken, opts()); got != base {
				t.Fatalf("hash %s, then %s", base, got)
			}
		}
	})

	t.Run("holds no value in the clear", func(t *testing.T) {
		for _, s := range []string{secretValue, configMapValue, testToken} {
			if strings.Contains(base, s) {
				t.Errorf("the hash holds %q", s)
			}
		}
	})
}
