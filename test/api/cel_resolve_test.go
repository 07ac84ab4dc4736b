package api_test

import (
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// Validation is written twice: as the CRD's schema and CEL rules, which the
// apiserver applies on write, and in policy.Resolve, which the manager
// applies to what it reads (an object written before a rule existed, or
// with validation bypassed). One table of manifests, one valid and one
// invalid for each rule the two share, goes through both; each must reach
// the same verdict.

var _ = Describe("The CRD's rules and policy.Resolve", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	DescribeTable("reach the same verdict on each manifest",
		func(ctx SpecContext, obj *v1alpha1.McpServer, valid bool) {
			obj = obj.DeepCopy()
			obj.Namespace = ns
			apiErr := k8sClient.Create(ctx, obj.DeepCopy(), client.DryRunAll)
			if apiErr != nil {
				Expect(apierrors.IsInvalid(apiErr)).To(BeTrue(), "the apiserver refused it for another reason: %v", apiErr)
			}
			// Every Secret and ConfigMap the spec names exists, as the
			// manager reads them before resolving.
			values := policy.Values{}
			for _, ref := range policy.Refs(&obj.Spec) {
				values[ref] = "value"
			}
			_, resolveErr := policy.Resolve(ns, obj.Name, &obj.Spec, values,
				policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}})
			if resolveErr != nil {
				var ise *policy.InvalidSpecError
				Expect(errors.As(resolveErr, &ise)).To(BeTrue(), "Resolve failed for another reason: %v", resolveErr)
			}
			Expect(apiErr == nil).To(Equal(valid), "the apiserver: %v", apiErr)
			Expect(resolveErr == nil).To(Equal(valid), "policy.Resolve: %v", resolveErr)
		},

		// The transport discriminator.
		Entry("stdio with its block", stdioServer(), true),
		Entry("stdio without its block", stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio = nil }), false),
		Entry("stdio with a streamableHttp block as well", stdioServer(func(s *v1alpha1.McpServer) {
			s.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: "http://tools:3000/mcp"}
		}), false),
		Entry("streamable-http with its block", httpServer(), true),
		Entry("streamable-http without its block", httpServer(func(s *v1alpha1.McpServer) { s.Spec.StreamableHTTP = nil }), false),
		Entry("streamable-http with a stdio block as well", httpServer(func(s *v1alpha1.McpServer) {
			s.Spec.Stdio = &v1alpha1.StdioTransport{Command: "npx"}
		}), false),

		// spec.idle.suspendAfterMs.
		Entry("stdio suspended after 60000 ms", stdioServer(suspendAfter(60000)), true),
		Entry("stdio suspended after 1000 ms", stdioServer(suspendAfter(1000)), false),
		Entry("streamable-http with suspendAfterMs 0", httpServer(suspendAfter(0)), true),
		Entry("streamable-http with suspendAfterMs 60000", httpServer(suspendAfter(60000)), false),

		// spec.stdio.env.
		Entry("env from a Secret", stdioServer(env(corev1.EnvVar{Name: "TOKEN",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("creds", "token")}})), true),
		Entry("env with value and valueFrom", stdioServer(env(corev1.EnvVar{Name: "TOKEN", Value: "x",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("creds", "token")}})), false),
		Entry("env valueFrom a Secret and a ConfigMap", stdioServer(env(corev1.EnvVar{Name: "TOKEN",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("creds", "token"), ConfigMapKeyRef: configMapRef("cfg", "token")}})), false),
		Entry("env valueFrom a field", stdioServer(env(corev1.EnvVar{Name: "NODE",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}})), false),
		Entry("env with an empty name", stdioServer(env(corev1.EnvVar{Name: "", Value: "x"})), false),

		// spec.stdio.image and resources (the Pod runtime).
		Entry("an image by tag", stdioServer(image("ghcr.io/org/server:1.2")), true),
		Entry("an image that is no reference", stdioServer(image("Not An Image")), false),
		Entry("cpu and memory requested", stdioServer(image("ghcr.io/org/server:1.2"),
			resources(map[string]string{"cpu": "100m", "memory": "64Mi"}, nil)), true),
		Entry("a GPU requested", stdioServer(image("ghcr.io/org/server:1.2"),
			resources(map[string]string{"nvidia.com/gpu": "1"}, nil)), false),
		Entry("a GPU limited", stdioServer(image("ghcr.io/org/server:1.2"),
			resources(nil, map[string]string{"nvidia.com/gpu": "1"})), false),
		Entry("resource claims", stdioServer(image("ghcr.io/org/server:1.2"), func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Resources = &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}), false),

		// spec.streamableHttp.
		Entry("an https URL", httpServer(url("https://tools.example.com/mcp")), true),
		Entry("an ftp URL", httpServer(url("ftp://tools.example.com/mcp")), false),
		Entry("a URL without a host", httpServer(url("http:///mcp")), false),
		Entry("two headers differing only in case", httpServer(headers(
			v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("a")}, v1alpha1.HTTPHeader{Name: "x-team", Value: ptr.To("b")})), false),
		Entry("a header without value or valueFrom", httpServer(headers(v1alpha1.HTTPHeader{Name: "X-Team"})), false),
		Entry("a header value with a line break", httpServer(headers(v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("a\r\nb")})), false),

		// spec.reconnect.
		Entry("initialDelayMs equal to maxDelayMs", stdioServer(reconnect(v1alpha1.ReconnectPolicy{
			InitialDelayMs: ptr.To[int32](1000), MaxDelayMs: ptr.To[int32](1000)})), true),
		Entry("initialDelayMs above maxDelayMs", stdioServer(reconnect(v1alpha1.ReconnectPolicy{
			InitialDelayMs: ptr.To[int32](2000), MaxDelayMs: ptr.To[int32](1000)})), false),

		// spec.tools.
		Entry("a tool glob with a class", stdioServer(toolFilter(globs("get_[a-z]*"), nil)), true),
		Entry("a tool glob with an unclosed class", stdioServer(toolFilter(globs("[abc"), nil)), false),

		// spec.serverName against metadata.name.
		Entry("a name that is no serverName, with spec.serverName", stdioServer(named("fixture.v2"),
			func(s *v1alpha1.McpServer) { s.Spec.ServerName = "fixture_v2" }), true),
		Entry("a name that is no serverName, without spec.serverName", stdioServer(named("fixture.v2")), false),
	)
})
