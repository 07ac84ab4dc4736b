package controller_test

import (
	"context"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
)

var _ = Describe("Manager restart", Ordered, func() {

	It("disposes every child on shutdown and re-adopts every resource, continuing the connection generation", func(ctx SpecContext) {
		ns := newNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, stdioServer(ns, "a", "--events-file="+events))).To(Succeed())
		Expect(k8s.Create(ctx, stdioServer(ns, "b"))).To(Succeed())
		a, b := readyAt(ns, "a", 1), readyAt(ns, "b", 1)
		pid := lifetimes(events)[0].PID

		stopManager()
		Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "no child may outlive the manager")

		startManager()
		Expect(readyAt(ns, "a", a.Status.ConnectionGeneration+1).Status.ConnectionGeneration).
			To(Equal(a.Status.ConnectionGeneration + 1))
		Expect(readyAt(ns, "b", b.Status.ConnectionGeneration+1).Status.ConnectionGeneration).
			To(Equal(b.Status.ConnectionGeneration + 1))
	})

	It("reports InvalidSpec, naming the field, for a spec that bypassed the CRD", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		Expect(k8s.Create(ctx, stdioServer(ns, "bad"))).To(Succeed())

		// The apiserver would refuse this spec; a reader that rewrites it
		// after the real Get stands for a programmatic caller.
		wc := directClient()
		reader := rewritingGets(wc, func(obj client.Object) {
			if m, ok := obj.(*v1alpha1.McpServer); ok {
				m.Spec.Reconnect.InitialDelayMs = ptr32(5000)
				m.Spec.Reconnect.MaxDelayMs = ptr32(1000)
			}
		})
		r := standaloneReconciler(wc, reader, controller.SupervisorsOptions{})
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "bad"}})
		Expect(err).NotTo(HaveOccurred())
		got := get(ns, "bad")
		Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseInvalid))
		c := meta(got, v1alpha1.ConditionReady)
		Expect(c.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
		Expect(c.Message).To(ContainSubstring("spec.reconnect.initialDelayMs"))
		Expect(meta(got, v1alpha1.ConditionStalled).Status).To(BeEquivalentTo("True"))
		Expect(r.Supervisors.Get(client.ObjectKey{Namespace: ns, Name: "bad"})).To(BeNil(), "an invalid spec never connects")
	})
})

// runSupervisors starts a standalone supervisor set until the spec ends.
func runSupervisors(s *controller.Supervisors) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Start(ctx)
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 10*time.Second).Should(BeClosed())
	})
}

// withoutFieldSelectors lists without the manager cache's field indexes (the
// apiserver does not know them) and returns every item of the namespace:
// the reconciler filters the serverName holders itself.
func withoutFieldSelectors(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := (&client.ListOptions{}).ApplyOptions(opts)
			return c.List(ctx, list, client.InNamespace(lo.Namespace))
		},
	})
}
