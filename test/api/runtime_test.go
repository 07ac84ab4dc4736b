package api_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// The spec.stdio fields of the Pod runtime (image, imagePullPolicy,
// resources, serviceAccountName) and the status fields that say which
// runtime runs a server.

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func image(ref string) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Stdio.Image = ref }
}

func pullPolicy(p corev1.PullPolicy) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Stdio.ImagePullPolicy = p }
}

func serviceAccount(name string) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Stdio.ServiceAccountName = name }
}

// resources sets spec.stdio.resources from "requests"/"limits" maps.
func resources(requests, limits map[string]string) mutation {
	list := func(m map[string]string) corev1.ResourceList {
		if m == nil {
			return nil
		}
		l := corev1.ResourceList{}
		for k, v := range m {
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	return func(s *v1alpha1.McpServer) {
		s.Spec.Stdio.Resources = &corev1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}
	}
}

var _ = Describe("Invalid McpServer manifests: the Pod runtime's fields", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	DescribeTable("are refused by the apiserver with the field named",
		func(ctx SpecContext, obj client.Object, fieldPath string) {
			expectRefused(ctx, ns, obj, fieldPath)
		},
		// spec.stdio.image: a reference, checked for shape (CEL) and length.
		Entry("image with a space", stdioServer(image("ghcr.io/org/srv :1")), "spec.stdio.image"),
		Entry("image with a newline", stdioServer(image("srv:1\nsrv:2")), "spec.stdio.image"),
		Entry("image with an upper-case repository", stdioServer(image("ghcr.io/Org/srv:1")), "spec.stdio.image"),
		Entry("image with an empty tag", stdioServer(image("srv:")), "spec.stdio.image"),
		Entry("image that is only a tag", stdioServer(image(":1")), "spec.stdio.image"),
		Entry("image with a URL scheme", stdioServer(image("https://ghcr.io/org/srv:1")), "spec.stdio.image"),
		Entry("image with a short digest", stdioServer(image("srv@sha256:abc")), "spec.stdio.image"),
		Entry("image with a tag of 129 characters", stdioServer(image("srv:"+strings.Repeat("t", 129))), "spec.stdio.image"),
		Entry("image of 1025 characters", stdioServer(image("r.io/"+strings.Repeat("a", 1020))), "spec.stdio.image"),

		// spec.stdio.imagePullPolicy: the enum.
		Entry("imagePullPolicy Sometimes", stdioServer(image("srv:1"), pullPolicy("Sometimes")), "spec.stdio.imagePullPolicy"),
		Entry("imagePullPolicy in lower case", stdioServer(image("srv:1"), pullPolicy("always")), "spec.stdio.imagePullPolicy"),

		// spec.stdio.serviceAccountName: a DNS-1123 subdomain.
		Entry("serviceAccountName with an underscore", stdioServer(image("srv:1"), serviceAccount("mcp_runner")),
			"spec.stdio.serviceAccountName"),
		Entry("serviceAccountName in upper case", stdioServer(image("srv:1"), serviceAccount("Runner")),
			"spec.stdio.serviceAccountName"),
		Entry("serviceAccountName of 254 characters", stdioServer(image("srv:1"), serviceAccount(strings.Repeat("a", 254))),
			"spec.stdio.serviceAccountName"),

		// spec.stdio.resources: cpu, memory, ephemeral-storage; requests <= limits.
		Entry("resources with a claim", stdioServer(image("srv:1"), func(s *v1alpha1.McpServer) {
			s.Spec.Stdio.Resources = &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}), "spec.stdio.resources"),
		Entry("resources limiting a GPU", stdioServer(image("srv:1"), resources(nil, map[string]string{"nvidia.com/gpu": "1"})),
			"spec.stdio.resources"),
		Entry("resources requesting hugepages", stdioServer(image("srv:1"), resources(map[string]string{"hugepages-2Mi": "2Mi"}, nil)),
			"spec.stdio.resources"),
		Entry("resources with a quantity that is no quantity",
			manifest(`{transport: stdio, stdio: {command: npx, resources: {limits: {memory: lots}}}}`),
			"spec.stdio.resources.limits.memory"),
	)

	It("refuses a status.runtime outside the enum and a status.podName too long", func(ctx SpecContext) {
		s := stdioServer()
		s.Namespace = ns
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		s.Status.Runtime = "Container"
		expectInvalid(k8sClient.Status().Update(ctx, s), "status.runtime")
		s.Status.Runtime = v1alpha1.RuntimePod
		s.Status.PodName = strings.Repeat("p", 254)
		expectInvalid(k8sClient.Status().Update(ctx, s), "status.podName")
	})
})

var _ = Describe("Valid McpServer manifests: the Pod runtime's fields", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	DescribeTable("are accepted at the edges and stored as sent",
		func(ctx SpecContext, obj *v1alpha1.McpServer) {
			got := createAndGet(ctx, ns, obj)
			Expect(got.Spec).To(Equal(withDefaults(obj.Spec)))
		},
		Entry("image: the default node image", stdioServer(image("node:22-bookworm-slim"))),
		Entry("image: the default python image", stdioServer(image("ghcr.io/astral-sh/uv:python3.13-bookworm-slim"))),
		Entry("image: a Docker Hub short name", stdioServer(image("nginx"))),
		Entry("image: a registry with a port", stdioServer(image("localhost:5000/org/srv:1.2"))),
		Entry("image: a digest", stdioServer(image("ghcr.io/org/srv@"+digest))),
		Entry("image: a tag and a digest", stdioServer(image("ghcr.io/org/sub/srv:1.2@"+digest))),
		Entry("image: an IPv6 registry", stdioServer(image("[fd00::1]:5000/srv:1"))),
		Entry("image: separators in the path", stdioServer(image("reg.io/a__b/c-d/e.f:v1_2-3.4"))),
		Entry("image: a tag of 128 characters", stdioServer(image("srv:"+strings.Repeat("t", 128)))),
		Entry("imagePullPolicy Always", stdioServer(image("srv:1"), pullPolicy(corev1.PullAlways))),
		Entry("imagePullPolicy IfNotPresent", stdioServer(image("srv:1"), pullPolicy(corev1.PullIfNotPresent))),
		Entry("imagePullPolicy Never", stdioServer(image("srv:1"), pullPolicy(corev1.PullNever))),
		Entry("serviceAccountName of 253 characters with dots",
			stdioServer(image("srv:1"), serviceAccount(strings.Repeat("a", 126)+"."+strings.Repeat("b", 126)))),
		Entry("resources: cpu, memory and ephemeral-storage, requests equal to limits",
			stdioServer(image("srv:1"), resources(
				map[string]string{"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"},
				map[string]string{"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"}))),
		Entry("resources: only limits", stdioServer(image("srv:1"), resources(nil, map[string]string{"memory": "32Mi"}))),
		Entry("resources: a zero request", stdioServer(image("srv:1"), resources(map[string]string{"cpu": "0"}, nil))),
		Entry("resources: request and limit of one resource in other units",
			stdioServer(image("srv:1"), resources(map[string]string{"cpu": "999m"}, map[string]string{"cpu": "1"}))),
		// Comparing quantities in CEL exceeds the CRD's cost budget (the
		// maps and their values are unbounded in corev1's schema): the Go
		// resolve step refuses these, with the field named.
		Entry("resources: a negative request (refused by the resolve step)",
			stdioServer(image("srv:1"), resources(map[string]string{"memory": "-1Mi"}, nil))),
		Entry("resources: a request above its limit (refused by the resolve step)",
			stdioServer(image("srv:1"), resources(map[string]string{"cpu": "2"}, map[string]string{"cpu": "1500m"}))),
		Entry("Pod-only fields without an image (the cluster may choose the Pod runtime)",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio.Command = "npx" }, pullPolicy(corev1.PullAlways),
				serviceAccount("runner"), resources(map[string]string{"memory": "128Mi"}, nil))),
	)

	It("accept the SPEC's example with every stdio field, empty strings meaning unset", func(ctx SpecContext) {
		obj := fromYAML(`
apiVersion: mcpbridge.dev/v1alpha1
kind: McpServer
metadata: {name: github}
spec:
  transport: stdio
  stdio:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-github"]
    env:
      - name: GITHUB_TOKEN
        valueFrom: {secretKeyRef: {name: github, key: token}}
    cwd: ""
    image: ""
    imagePullPolicy: IfNotPresent
    resources: {}
    serviceAccountName: ""
`)
		obj.SetNamespace(ns)
		Expect(k8sClient.Create(ctx, obj)).To(Succeed())
		got := &v1alpha1.McpServer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.Stdio.Image).To(BeEmpty())
		Expect(got.Spec.Stdio.ImagePullPolicy).To(Equal(corev1.PullIfNotPresent))
		Expect(got.Spec.Stdio.Resources).To(HaveValue(Equal(corev1.ResourceRequirements{})))
	})

	It("store no imagePullPolicy when it is left out: its default applies where it is used", func(ctx SpecContext) {
		got := createAndGet(ctx, ns, stdioServer(image("srv:1")))
		Expect(got.Spec.Stdio.ImagePullPolicy).To(BeEmpty())
		Expect(got.Spec.Stdio.Resources).To(BeNil())
	})

	It("store status.runtime and status.podName", func(ctx SpecContext) {
		s := createAndGet(ctx, ns, stdioServer(image("srv:1")))
		s.Status.Runtime = v1alpha1.RuntimePod
		s.Status.PodName = "fixture-mcp-7d9c5b6f8-xk2p4"
		Expect(k8sClient.Status().Update(ctx, s)).To(Succeed())
		got := &v1alpha1.McpServer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		Expect(got.Status.Runtime).To(Equal(v1alpha1.RuntimePod))
		Expect(got.Status.PodName).To(Equal("fixture-mcp-7d9c5b6f8-xk2p4"))
		s.Status.Runtime = v1alpha1.RuntimeLocal
		s.Status.PodName = ""
		Expect(k8sClient.Status().Update(ctx, s)).To(Succeed())
	})
})
