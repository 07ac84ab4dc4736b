package controller_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/test/fixture"
)

var _ = Describe("Status economy", func() {
	It("takes at most 4 status writes from create to Ready and none while idle and healthy", func(ctx SpecContext) {
		ns := newNamespace()
		w := watchMcpServers(ns)

		obj := stdioServer(ns, "fx")
		// Probes run (two in the idle window below), status stays still. A
		// probe may take half the interval and a loss is two failed probes
		// in a row, so only a machine that stalls a ping for a second twice
		// running could make one here (50 ms probes at 100 ms, then 250 ms
		// probes at 500 ms, timed out twice in a row under -race on a loaded
		// machine: a real loss, and a write).
		const interval = 2 * time.Second
		obj.Spec.HealthCheckIntervalMs = ptr32(int32(interval.Milliseconds()))
		Expect(k8s.Create(ctx, obj)).To(Succeed())

		writes := 0
		untilPhase(w, v1alpha1.PhaseReady, func(ev watch.Event) {
			if ev.Type == watch.Modified {
				writes++
			}
		})
		GinkgoWriter.Printf("status writes from create to Ready: %d\n", writes)
		Expect(writes).To(BeNumerically("<=", 4))

		Consistently(w.ResultChan()).WithTimeout(interval*5/2).WithPolling(50*time.Millisecond).ShouldNot(Receive(),
			"an idle, healthy resource gets no status writes")
	})
})

var _ = Describe("A new server's first status", func() {
	It("is Ready, one write, when the server connects within the first-status wait", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		w := watchMcpServers(ns)
		// The server answers only once the first reconcile is over: that
		// one sees it connecting, whatever the machine's speed.
		fx, err := fixture.NewHTTPHandler(fixture.Options{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fx.Close)
		opened := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
			select {
			case <-opened:
				fx.ServeHTTP(rw, req)
			case <-req.Context().Done():
			}
		}))
		DeferCleanup(func() { srv.CloseClientConnections(); srv.Close() })
		open := sync.OnceFunc(func() { close(opened) })
		DeferCleanup(open) // before the server closes, also when the spec fails early
		obj := httpServer(ns, "s", srv.URL+"/mcp")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		key := client.ObjectKeyFromObject(obj)
		reader, apiGets := countingMcpServerGets(directClient())
		r := standaloneReconciler(directClient(), reader, controller.SupervisorsOptions{Egress: testEgress("127.0.0.0/8")})
		controller.TrackWrites(r)
		r.FirstStatusWait = time.Hour // the server connects well within it on any machine

		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		open()
		Eventually(func(g Gomega) {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(get(ns, "s").Status.Phase).To(Equal(v1alpha1.PhaseReady))
		}, eventuallyTimeout, poll).Should(Succeed())
		var phases []v1alpha1.Phase
		untilPhase(w, v1alpha1.PhaseReady, func(ev watch.Event) {
			if m, ok := ev.Object.(*v1alpha1.McpServer); ok && ev.Type == watch.Modified {
				phases = append(phases, m.Status.Phase)
			}
		})
		Expect(phases).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseReady}), "no Connecting write before the first connection")
		Expect(apiGets.Load()).To(BeEquivalentTo(1),
			"only the reconcile that started the server reads the API: the copy it read stands in for the owner's write")
	})

	It("is written at once after a failed attempt", func(ctx SpecContext) {
		ns := newNamespace()
		stopManager()
		DeferCleanup(startManager)
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		closed := ln.Addr().String()
		Expect(ln.Close()).To(Succeed()) // nothing listens there: every attempt is refused
		obj := httpServer(ns, "refused", "http://"+closed+"/mcp")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		key := client.ObjectKeyFromObject(obj)
		r := standaloneReconciler(directClient(), directClient(), controller.SupervisorsOptions{Egress: testEgress("127.0.0.0/8")})
		controller.TrackWrites(r)
		r.Recorder = &events.FakeRecorder{} // an event per refused attempt, none read here
		r.FirstStatusWait = time.Hour

		Eventually(func(g Gomega) {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			got := get(ns, "refused")
			g.Expect(got.Status.FailedAttempts).To(BeNumerically(">=", 1))
			g.Expect(got.Status.LastError).NotTo(BeNil())
		}, eventuallyTimeout, poll).Should(Succeed(), "a failed attempt does not wait for the end of the first-status wait")
	})

	It("is Connecting once the wait has passed without a connection", func(ctx SpecContext) {
		const wait = 3 * time.Second // the first reconcile returns well within it
		ns, key, r := stalledServer(ctx, wait)

		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", wait)), "the reconcile comes back when the wait ends")
		Expect(get(ns, "slow").Status.Phase).To(BeEmpty(), "nothing is written while the wait lasts")
		Eventually(func(g Gomega) {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(get(ns, "slow").Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
		}, eventuallyTimeout, poll).Should(Succeed())
	})

	It("keeps its wait across spec edits, so that edits cannot hold it back for ever", func(ctx SpecContext) {
		ns, key, r := stalledServer(ctx, time.Hour)

		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		first := r.Supervisors.Get(key)
		Expect(first).NotTo(BeNil())
		Eventually(func() time.Duration { age, _ := r.Supervisors.Age(key); return age }, eventuallyTimeout, poll).
			Should(BeNumerically(">", time.Second))

		edited := get(ns, "slow")
		edited.Spec.ConnectionTimeoutMs = ptr32(59000)
		Expect(k8s.Update(ctx, edited)).To(Succeed())
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Supervisors.Get(key)).NotTo(BeIdenticalTo(first), "the edit swapped the supervisor")
		Expect(get(ns, "slow").Status.Phase).To(BeEmpty())
		Expect(res.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", time.Hour-time.Second)),
			"the wait goes on from the first supervisor's start")
	})
})

// stalledServer creates a server whose initialize never answers and a
// reconciler of its own, outside the suite's manager, whose first status
// waits for wait.
func stalledServer(ctx context.Context, wait time.Duration) (string, types.NamespacedName, *controller.McpServerReconciler) {
	GinkgoHelper()
	ns := newNamespace()
	stopManager()
	DeferCleanup(startManager)
	obj := stdioServer(ns, "slow", "--stall-initialize")
	obj.Spec.ConnectionTimeoutMs = ptr32(60000)
	Expect(k8s.Create(ctx, obj)).To(Succeed())
	r := standaloneReconciler(directClient(), directClient(), controller.SupervisorsOptions{})
	controller.TrackWrites(r)
	r.FirstStatusWait = wait
	return ns, client.ObjectKeyFromObject(obj), r
}
