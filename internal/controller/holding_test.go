package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/test/fixture"
)

var _ = Describe("Holding a stdio server among replicas", func() {
	It("stops the child at once when this replica drops out of its own live set, though it sees no other replica", func(ctx SpecContext) {
		ns := newNamespace()
		replicas := &replicasWhere{owner: "self", selfLive: true}
		r := replicaReconciler(replicas)
		Expect(k8s.Create(ctx, stdioServer(ns, "s"))).To(Succeed())
		web := httpFixtureServer(ns, "web")
		Expect(k8s.Create(ctx, web)).To(Succeed())
		stdio, http := client.ObjectKey{Namespace: ns, Name: "s"}, client.ObjectKeyFromObject(web)
		for _, key := range []client.ObjectKey{stdio, http} {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Supervisors.Get(key)).NotTo(BeNil(), "the owner runs %s", key.Name)
		}

		// Cut off: no renewal accepted lately, and every peer's Lease looks
		// expired too, as no watch event arrives: nobody owns anything.
		replicas.owner, replicas.selfLive = "", false
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: http})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Supervisors.Present(stdio)).To(BeFalse(), "a cut-off replica still runs a child a peer may start")
		Expect(r.Supervisors.Get(http)).NotTo(BeNil(), "a Streamable HTTP connection stays")
	})

	It("stops the child without waiting for a call in flight to it when this replica drops out of its own live set", func(ctx SpecContext) {
		ns := newNamespace()
		replicas := &replicasWhere{owner: "self", selfLive: true}
		// Waiting for the call would take an hour: a fence that drained
		// first would not return within the Eventually below.
		r := replicaReconcilerWith(replicas, controller.SupervisorsOptions{DrainTimeout: time.Hour})
		Expect(k8s.Create(ctx, stdioServer(ns, "s"))).To(Succeed())
		key := client.ObjectKey{Namespace: ns, Name: "s"}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		sup := r.Supervisors.Get(key)
		Expect(sup).NotTo(BeNil())
		Eventually(func(g Gomega) {
			_, err := sup.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": "up"})
			g.Expect(err).NotTo(HaveOccurred())
		}, eventuallyTimeout, poll).Should(Succeed())
		callDone := make(chan error, 1)
		go func() {
			_, err := sup.CallTool(context.Background(), fixture.ToolSleep, map[string]any{"ms": time.Hour.Milliseconds()})
			callDone <- err
		}()
		Eventually(sup.InFlight, eventuallyTimeout, poll).Should(Equal(1))

		replicas.owner, replicas.selfLive = "", false
		fenceCtx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		fenced := make(chan error, 1)
		go func() {
			_, err := r.Reconcile(fenceCtx, reconcile.Request{NamespacedName: key})
			fenced <- err
		}()
		Eventually(fenced, eventuallyTimeout).Should(Receive(BeNil()), "the fence waited for the call in flight")
		Expect(r.Supervisors.Present(key)).To(BeFalse(), "a cut-off replica still runs a child a peer may start")
		Eventually(callDone, eventuallyTimeout).Should(Receive(HaveOccurred()), "the call in flight ends with its child")
	})

	It("starts no child while the apiserver names another replica that may hold it, whatever a stale cache says", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		Expect(k8s.Create(ctx, stdioServer(ns, "s"))).To(Succeed())
		ts := &v1alpha1.McpToolSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
			Spec: v1alpha1.McpToolSetSpec{ServerName: "s", Holder: "peer"}}
		Expect(k8s.Create(ctx, ts)).To(Succeed())

		// The cache of a replica whose watch is behind: it still names this
		// replica, which held the server before it lost the apiserver.
		wc := directClient()
		stale := rewritingGets(wc, func(obj client.Object) {
			if ts, ok := obj.(*v1alpha1.McpToolSet); ok {
				ts.Spec.Holder = "self"
			}
		})
		r := standaloneReconciler(stale, wc, controller.SupervisorsOptions{})
		r.Replica, r.Replicas = "self", &replicasWhere{owner: "self", mayHold: "peer", selfLive: true}
		key := client.ObjectKey{Namespace: ns, Name: "s"}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Supervisors.Get(key)).To(BeNil(), "a child started beside the one of the replica the apiserver names")
		got := get(ns, "s")
		Expect(got.Status.Phase).To(Equal(v1alpha1.PhasePending))
		Expect(meta(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonHandingOver))
		Expect(meta(got, v1alpha1.ConditionReady).Message).To(ContainSubstring(`"peer"`))
	})
})

// replicasWhere is a membership in which owner owns every server, only
// mayHold may still run a child besides, this replica is in its own live
// set while selfLive, and unreachedBy report that they cannot reach it.
type replicasWhere struct {
	owner, mayHold string
	selfLive       bool
	unreachedBy    []string
}

func (r *replicasWhere) UnreachedBy() []string { return r.unreachedBy }

func (r *replicasWhere) Owner(types.UID) string   { return r.owner }
func (r *replicasWhere) MayHold(name string) bool { return name == r.mayHold || name == r.owner }
func (r *replicasWhere) SelfLive() bool           { return r.selfLive }
