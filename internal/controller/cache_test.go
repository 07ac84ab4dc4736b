package controller_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
)

// The manager's cache keeps of each object what the manager reads
// (docs/design.md, "Limits"): no managedFields, and of the annotations only restartedAt and the
// template hash.
var _ = Describe("The manager's cache", func() {
	bulky := strings.Repeat("x", 64<<10)

	It("strips managedFields and unread annotations of McpServers", func(ctx SpecContext) {
		ns := newNamespace()
		obj := stdioServer(ns, "cached")
		obj.Annotations = map[string]string{v1alpha1.RestartedAtAnnotation: "2026-12-01T00:00:00Z", "example.com/bulky": bulky}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		Expect(get(ns, "cached").ManagedFields).NotTo(BeEmpty(), "the apiserver keeps managedFields")

		Eventually(func(g Gomega) {
			cached := &v1alpha1.McpServer{}
			g.Expect(mgrCache.Get(ctx, client.ObjectKeyFromObject(obj), cached)).To(Succeed())
			g.Expect(cached.ManagedFields).To(BeEmpty())
			g.Expect(cached.Annotations).To(Equal(map[string]string{v1alpha1.RestartedAtAnnotation: "2026-12-01T00:00:00Z"}))
		}, eventuallyTimeout, poll).Should(Succeed())
	})

	It("strips managedFields and unread annotations of the Pod runtime's Pods", func(ctx SpecContext) {
		ns := newNamespace()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server",
				Labels:      map[string]string{podruntime.ManagedByLabel: podruntime.ManagedByValue},
				Annotations: map[string]string{podruntime.TemplateHashAnnotation: "h1", "example.com/bulky": bulky}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "example.com/fixture:1"}}},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())

		Eventually(func(g Gomega) {
			cached := &corev1.Pod{}
			g.Expect(mgrCache.Get(ctx, client.ObjectKeyFromObject(pod), cached)).To(Succeed())
			g.Expect(cached.ManagedFields).To(BeEmpty())
			g.Expect(cached.Annotations).To(Equal(map[string]string{podruntime.TemplateHashAnnotation: "h1"}))
		}, eventuallyTimeout, poll).Should(Succeed())
	})
})
