package controller_test

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

var _ = Describe("A server whose owner other replicas cannot reach", func() {
	It("is Degraded while a live replica reports it cannot reach the owner, and Ready all along", func(ctx SpecContext) {
		ns := newNamespace()
		replicas := &replicasWhere{owner: "self", selfLive: true}
		r := replicaReconciler(replicas)
		web := httpFixtureServer(ns, "web")
		Expect(k8s.Create(ctx, web)).To(Succeed())
		key := client.ObjectKeyFromObject(web)
		reconcileUntilReady := func() *v1alpha1.McpServer {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(get(ns, "web").Status.Phase).To(Equal(v1alpha1.PhaseReady))
			}).WithTimeout(30 * time.Second).Should(Succeed())
			return get(ns, "web")
		}
		requeued := func() bool {
			return slices.Contains(r.Moved(ctx), reconcile.Request{NamespacedName: key})
		}
		got := reconcileUntilReady()
		Expect(meta(got, v1alpha1.ConditionDegraded)).To(BeNil())
		Expect(requeued()).To(BeFalse(), "a membership event requeues a server whose status is current")

		replicas.unreachedBy = []string{"peer-a", "peer-b"}
		Expect(requeued()).To(BeTrue(), "the event that peers cannot reach this replica does not requeue its server")
		got = reconcileUntilReady()
		degraded := meta(got, v1alpha1.ConditionDegraded)
		Expect(degraded).NotTo(BeNil(), "conditions: %v", got.Status.Conditions)
		Expect(degraded.Status).To(BeEquivalentTo("True"))
		Expect(degraded.Reason).To(Equal(v1alpha1.ReasonReplicaUnreachable))
		Expect(degraded.Message).To(And(HavePrefix("Replicas peer-a, peer-b cannot reach"), ContainSubstring("replica self"),
			ContainSubstring("mcpbridge-replica-peer-a, mcpbridge-replica-peer-b")))
		Expect(degraded.ObservedGeneration).To(Equal(got.Generation))
		Expect(meta(got, v1alpha1.ConditionReady).Status).To(BeEquivalentTo("True"), "the server itself still works")
		Expect(kstatusOf(got)).To(Equal(status.CurrentStatus), "kubectl wait and GitOps tools still see it current")
		Expect(requeued()).To(BeFalse(), "requeued again once its status says so")
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ns, "web").ResourceVersion).To(Equal(got.ResourceVersion), "written again for the same replicas")

		replicas.unreachedBy = nil
		Expect(requeued()).To(BeTrue(), "the event that every peer reaches this replica again does not requeue its server")
		got = reconcileUntilReady()
		Expect(meta(got, v1alpha1.ConditionDegraded)).To(BeNil(), "removed once every replica reaches the owner")
	})
})
