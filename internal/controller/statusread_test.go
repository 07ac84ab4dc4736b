package controller_test

import (
	"context"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
)

var _ = Describe("The owner's reads for its status writes", func() {
	It("reads a server from the cache while the cache holds the owner's last write or no status, from the API otherwise, and refuses a write computed against an older copy", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		created := httpFixtureServer(ns, "s")
		Expect(k8s.Create(ctx, created)).To(Succeed())
		key := client.ObjectKeyFromObject(created)

		wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		var apiGets atomic.Int32
		reader := interceptor.NewClient(wc, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*v1alpha1.McpServer); ok {
					apiGets.Add(1)
				}
				return c.Get(ctx, k, obj, opts...)
			},
		})
		// The cache: the apiserver's copy, or, while behind, the copy the
		// create returned (no status, its first resourceVersion).
		var behind atomic.Bool
		cached := rewritingGets(wc, func(obj client.Object) {
			if m, ok := obj.(*v1alpha1.McpServer); ok && behind.Load() {
				*m = *created.DeepCopy()
			}
		})
		r := standaloneReconciler(cached, reader, controller.SupervisorsOptions{Egress: testEgress("127.0.0.0/8")})
		controller.TrackWrites(r)
		reconcileOnce := func(g Gomega) reconcile.Result {
			res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			return res
		}

		By("a new server and every reconcile after the owner's own writes: the cache")
		Eventually(func(g Gomega) {
			reconcileOnce(g)
			g.Expect(get(ns, "s").Status.Phase).To(Equal(v1alpha1.PhaseReady))
		}, eventuallyTimeout).Should(Succeed())
		reconcileOnce(Default)
		Expect(apiGets.Load()).To(BeZero(), "the cache held the owner's last write")

		By("someone else wrote since: the API")
		s := get(ns, "s")
		s.Annotations = map[string]string{"example.com/touched": "yes"}
		Expect(k8s.Update(ctx, s)).To(Succeed())
		reconcileOnce(Default)
		Expect(apiGets.Load()).To(BeEquivalentTo(1))

		By("a cache behind the apiserver that shows no status: the write is computed, refused and retried")
		behind.Store(true)
		before := get(ns, "s")
		res := reconcileOnce(Default)
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a refused write is retried")
		after := get(ns, "s")
		Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "a write against an older copy must be refused")
		Expect(after.Status).To(Equal(before.Status))
		Expect(apiGets.Load()).To(BeEquivalentTo(1), "a copy without status is read from the cache")
	})
})
