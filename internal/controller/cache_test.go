package controller_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/internal/podruntime"
)

// The manager's cache keeps of each object what the manager reads
// (docs/design.md, "Limits"): no managedFields, and of the annotations only restartedAt and the
// template hash; of an McpServer that another replica owns, no status
// lists (docs/design.md, "Replicas and ownership").
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

	It("keeps of a server another replica owns only what every replica reads", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "owned"))).To(Succeed())
		key := client.ObjectKey{Namespace: ns, Name: "owned"}
		Expect(readyAt(ns, "owned", 1).Status.Tools).NotTo(BeEmpty())

		// The cache of another replica, built as the manager builds its own.
		other, err := cache.New(env.Config, controller.CacheOptions(cache.Options{Scheme: env.Scheme,
			DefaultNamespaces: map[string]cache.Config{ns: {}}}, "manager-test-1"))
		Expect(err).NotTo(HaveOccurred())
		otherCtx, stop := context.WithCancel(ctx)
		DeferCleanup(stop)
		go func() { _ = other.Start(otherCtx) }()

		Eventually(func(g Gomega) {
			cached := &v1alpha1.McpServer{}
			g.Expect(other.Get(ctx, key, cached)).To(Succeed())
			g.Expect(cached.Status.Replica).To(Equal(replicaName))
			g.Expect(cached.Status.Phase).To(Equal(v1alpha1.PhaseReady))
			g.Expect(cached.Status.ToolCount).NotTo(BeZero())
			g.Expect(cached.Status.Tools).To(BeEmpty())
			g.Expect(cached.Status.Conditions).To(BeEmpty())
			g.Expect(cached.Status.ServerInfo).To(BeNil())
		}, eventuallyTimeout, poll).Should(Succeed())
		// The owner's own cache keeps its status whole.
		mine := &v1alpha1.McpServer{}
		Expect(mgrCache.Get(ctx, key, mine)).To(Succeed())
		Expect(mine.Status.Tools).NotTo(BeEmpty())
		Expect(mine.Status.Conditions).NotTo(BeEmpty())
	})
})
