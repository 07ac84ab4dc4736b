package controller_test

import (
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
)

var _ = Describe("The owner's reads for its status writes", func() {
	It("reads a server from the cache while it runs here and the cache holds the owner's last write, from the API otherwise and before it starts, and refuses a write computed against an older copy", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		created := httpFixtureServer(ns, "s")
		Expect(k8s.Create(ctx, created)).To(Succeed())
		key := client.ObjectKeyFromObject(created)

		wc := directClient()
		reader, apiGets := countingMcpServerGets(wc)
		// The cache: the apiserver's copy, or, while behind is set, that
		// copy instead.
		var behind atomic.Pointer[v1alpha1.McpServer]
		cached := rewritingGets(wc, func(obj client.Object) {
			if m, ok := obj.(*v1alpha1.McpServer); ok && behind.Load() != nil {
				*m = *behind.Load().DeepCopy()
			}
		})
		r := standaloneReconciler(cached, reader, controller.SupervisorsOptions{Egress: testEgress("127.0.0.0/8")})
		controller.TrackWrites(r)
		reconcileOnce := func(g Gomega) reconcile.Result {
			res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			return res
		}

		By("the server starts here: the API once; every reconcile after the owner's own writes: the cache")
		Eventually(func(g Gomega) {
			reconcileOnce(g)
			g.Expect(get(ns, "s").Status.Phase).To(Equal(v1alpha1.PhaseReady))
		}, eventuallyTimeout).Should(Succeed())
		reconcileOnce(Default)
		Expect(apiGets.Load()).To(BeEquivalentTo(1), "only the reconcile that started the server reads the API")
		ours := get(ns, "s") // the owner's last write

		By("someone else wrote since: the API")
		s := ours.DeepCopy()
		s.Annotations = map[string]string{"example.com/touched": "yes"}
		Expect(k8s.Update(ctx, s)).To(Succeed())
		reconcileOnce(Default)
		Expect(apiGets.Load()).To(BeEquivalentTo(2))

		By("a cache that holds the owner's last write, behind someone else's: a status that changed since is written against it, and refused")
		changed := ours.DeepCopy()
		changed.Status.Phase = v1alpha1.PhaseConnecting // stands for a status the supervisor changed since
		behind.Store(changed)
		before := get(ns, "s")
		res := reconcileOnce(Default)
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a refused write is retried")
		Expect(get(ns, "s").ResourceVersion).To(Equal(before.ResourceVersion), "a write against an older copy must be refused")
		Expect(apiGets.Load()).To(BeEquivalentTo(2), "the copy of the owner's last write is read from the cache")

		By("a server about to start again, after another replica raised its generation: the API, whatever the cache holds")
		behind.Store(nil)
		raised := get(ns, "s")
		raised.Status.ConnectionGeneration += 5
		Expect(k8s.Status().Update(ctx, raised)).To(Succeed())
		behind.Store(ours)
		Expect(r.Supervisors.Stop(ctx, key)).To(Succeed())
		reconcileOnce(Default)
		Expect(apiGets.Load()).To(BeEquivalentTo(3))
		behind.Store(nil)
		Eventually(func(g Gomega) {
			reconcileOnce(g)
			got := get(ns, "s")
			g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseReady))
			g.Expect(got.Status.ConnectionGeneration).To(Equal(raised.Status.ConnectionGeneration+1), "the new connection continues from the status")
		}, eventuallyTimeout).Should(Succeed())
	})
})
