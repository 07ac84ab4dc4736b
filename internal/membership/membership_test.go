package membership_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/internal/membership"
)

var _ = Describe("Replica membership", func() {
	It("shows every live replica to every replica, and they agree on each server's owner", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		rs := []*replica{startReplica(ns, "a"), startReplica(ns, "b"), startReplica(ns, "c")}
		for _, r := range rs {
			r.joinedWithin(10 * time.Second)
		}
		for _, r := range rs {
			Eventually(r.Members).WithTimeout(10 * time.Second).Should(HaveExactElements(
				member("a", "10.0.0.1:8091"), member("b", "10.0.0.1:8091"), member("c", "10.0.0.1:8091")))
		}
		processes := map[string]bool{}
		for _, m := range rs[0].Members() {
			processes[m.Process] = true
		}
		Expect(processes).To(HaveLen(3), "each replica's process has an id of its own")
		Expect(processes).NotTo(HaveKey(""))
		owned := map[string]int{}
		for i := range 300 {
			uid := types.UID(fmt.Sprintf("uid-%d", i))
			o := rs[0].Owner(uid)
			Expect(rs[1].Owner(uid)).To(Equal(o))
			Expect(rs[2].Owner(uid)).To(Equal(o))
			owned[o]++
		}
		Expect(owned).To(HaveLen(3), "every replica owns some of 300 servers")

		l, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("b"), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(l.Spec.HolderIdentity).To(Equal(ptr.To("b")))
		Expect(l.Spec.LeaseDurationSeconds).To(Equal(ptr.To[int32](2)))
		Expect(l.Labels).To(HaveKeyWithValue("app.kubernetes.io/component", "replica"))
		Expect(l.Annotations).To(HaveKeyWithValue(membership.AddressAnnotation, "10.0.0.1:8091"))
		Expect(l.Annotations).To(HaveKey(membership.ProcessAnnotation))
	})

	It("drops a replica that stops gracefully at once, long before its Lease would expire", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a", withLeaseDuration(time.Minute), withHoldGrace(time.Minute))
		changes := a.Subscribe()
		b := startReplica(ns, "b", withLeaseDuration(time.Minute))
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "b"}))
		Eventually(changes).Should(Receive(leaseOf("b")), "b joined")

		Expect(b.stop()).To(Succeed())
		_, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("b"), metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "b's Lease is deleted when it stops: %v", err)
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a"}))
		Eventually(changes).Should(Receive(leaseOf("b")), "b left")
		Expect(a.MayHold("b")).To(BeFalse(), "a replica that deleted its Lease has let go of every child")
	})

	It("gives the servers of a stopping replica to the others at once, and keeps it live until it has let go", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a", withLeaseDuration(time.Minute))
		changes := a.Subscribe()
		letGo := make(chan struct{})
		b := startReplica(ns, "b", withLeaseDuration(time.Minute), withReleaseAfter(letGo))
		b.joinedWithin(10 * time.Second)
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "b"}))
		// b may join before a's Lease exists: it sees a only by its watch.
		Eventually(memberNames(b)).WithTimeout(10*time.Second).Should(Equal([]string{"a", "b"}), "b sees a")
		Eventually(changes).Should(Receive(leaseOf("b")), "b joined")
		uids := make([]types.UID, 50)
		for i := range uids {
			uids[i] = types.UID(fmt.Sprintf("uid-%d", i))
		}
		Expect(uids).To(ContainElement(WithTransform(a.Owner, Equal("b"))), "b owns some of 50 servers")

		b.cancel() // SIGTERM: b keeps its Lease until letGo
		Eventually(b.Leaving()).WithTimeout(10 * time.Second).Should(BeClosed())
		Eventually(changes).Should(Receive(leaseOf("b")), "b owns nothing any more")
		for _, uid := range uids {
			Expect(a.Owner(uid)).To(Equal("a"), "no server is b's once it leaves")
		}
		Expect(b.Owner(uids[0])).To(Equal("a"), "b agrees")
		_, live := a.Live("b")
		Expect(live).To(BeTrue(), "b is still live: the others forward to it and wait for it to let go")
		l, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("b"), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(l.Annotations).To(HaveKeyWithValue(membership.LeavingAnnotation, "true"))

		close(letGo)
		Eventually(b.exited).WithTimeout(10 * time.Second).Should(BeClosed())
		Eventually(func() bool { _, ok := a.Live("b"); return ok }).WithTimeout(10 * time.Second).Should(BeFalse())
	})

	It("drops a replica that stops renewing after its lease duration, then deletes its Lease", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a, b := startReplica(ns, "a"), startReplica(ns, "b")
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "b"}))

		b.crash()
		_, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("b"), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "a crash leaves the Lease behind")
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a"}))
		Eventually(func() bool {
			_, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("b"), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(20*time.Second).Should(BeTrue(), "the dead replica's Lease is collected")
		Consistently(memberNames(a)).WithTimeout(3*time.Second).Should(Equal([]string{"a"}), "a keeps renewing")
	})

	It("counts a replica cut off from the apiserver out of its own live set a third of a duration before its peers do, and waits the grace after that for its children", func(ctx SpecContext) {
		const d, grace = 6 * time.Second, 3 * time.Second
		ns := newNamespace(ctx)
		a := startReplica(ns, "a", withLeaseDuration(d), withHoldGrace(grace))
		x := startReplica(ns, "x", withLeaseDuration(d), withClient(leaseWriterWithoutUpdate(ctx, ns)))
		x.joinedWithin(10 * time.Second)
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "x"}))
		Eventually(func() bool { _, ok := x.Live("a"); return ok }).WithTimeout(d/3).Should(BeTrue(), "x sees a")
		uids := make([]types.UID, 50)
		for i := range uids {
			uids[i] = types.UID(fmt.Sprintf("uid-%d", i))
		}
		Expect(uids).To(ContainElement(WithTransform(a.Owner, Equal("x"))), "x owns some of 50 servers")

		// x's renewals are refused from its first one on: it created its
		// Lease and no write of it is accepted since.
		Eventually(x.Member).WithTimeout(d).WithPolling(10 * time.Millisecond).Should(BeFalse())
		for _, uid := range uids {
			Expect(x.Owner(uid)).To(Equal("a"), "x owns nothing once it counts itself out")
		}
		Consistently(func() bool { _, live := a.Live("x"); return live }).WithTimeout(d/6).Should(BeTrue(),
			"a still counts x in: x let go first")
		Eventually(memberNames(a)).WithTimeout(d).Should(Equal([]string{"a"}))

		held, left := a.MayHold("x")
		Expect(held).To(BeTrue(), "x may still be reaping the children of its stdio servers")
		Expect(left).To(BeNumerically("<=", grace))
		Eventually(func() bool { ok, _ := a.MayHold("x"); return ok }).WithTimeout(2 * grace).Should(BeFalse())
	})

	It("creates its Lease again when someone deletes it, and stays a member", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a")
		a.joinedWithin(10 * time.Second)
		l, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("a"), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		Expect(clientset.CoordinationV1().Leases(ns).Delete(ctx, l.Name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			now, err := clientset.CoordinationV1().Leases(ns).Get(ctx, l.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(now.UID).NotTo(Equal(l.UID))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Consistently(a.Member).WithTimeout(4 * time.Second).Should(BeTrue())
	})

	It("refuses a second process with the name of a live replica, and leaves the first alone", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a")
		a.joinedWithin(10 * time.Second)
		lease, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("a"), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		dup := startReplica(ns, "a")
		Eventually(dup.exited).WithTimeout(10 * time.Second).Should(BeClosed())
		Expect(dup.err).To(MatchError(ContainSubstring(`another live replica already holds --replica-name="a"`)))
		Expect(dup.Joined()).NotTo(BeClosed())

		Consistently(func(g Gomega) {
			l, err := clientset.CoordinationV1().Leases(ns).Get(ctx, membership.LeaseName("a"), metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.Annotations[membership.ProcessAnnotation]).To(Equal(lease.Annotations[membership.ProcessAnnotation]))
			g.Expect(memberNames(a)()).To(Equal([]string{"a"}))
		}).WithTimeout(4 * time.Second).Should(Succeed())
		Expect(a.exited).NotTo(BeClosed(), "the first replica runs on")
	})

	It("lets a restarted replica take over the Lease its crashed process left", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		b := startReplica(ns, "b")
		old := startReplica(ns, "a")
		old.joinedWithin(10 * time.Second)
		old.crash()

		restarted := startReplica(ns, "a")
		restarted.joinedWithin(15 * time.Second)
		Expect(restarted.exited).NotTo(BeClosed())
		Eventually(memberNames(b)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "b"}))
		Consistently(memberNames(b)).WithTimeout(4 * time.Second).Should(Equal([]string{"a", "b"}))
	})

	It("judges liveness by the observer's clock: skewed replicas are neither dropped while renewing nor kept once stopped", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a")
		fast := startReplica(ns, "fast", withClockOffset(time.Minute))
		slow := startReplica(ns, "slow", withClockOffset(-time.Minute))
		all := []string{"a", "fast", "slow"}
		for _, r := range []*replica{a, fast, slow} {
			Eventually(memberNames(r)).WithTimeout(10 * time.Second).Should(Equal(all))
		}
		// Several lease durations: a replica judged by the renewTime it
		// wrote would be dropped (slow) or dropping the others (fast).
		Consistently(func(g Gomega) {
			for _, r := range []*replica{a, fast, slow} {
				g.Expect(memberNames(r)()).To(Equal(all))
			}
		}).WithTimeout(6 * time.Second).Should(Succeed())

		// Its renewTime is a minute ahead; it still goes after 2 s.
		fast.crash()
		for _, r := range []*replica{a, slow} {
			Eventually(memberNames(r)).WithTimeout(15 * time.Second).Should(Equal([]string{"a", "slow"}))
		}
	})

	It("shows a replica that cannot renew its Lease as no member, to itself and in mcpbridge_replica_member", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a")
		x := startReplica(ns, "x", withClient(leaseWriterWithoutUpdate(ctx, ns)))
		x.joinedWithin(10 * time.Second)
		Eventually(x.Member).WithTimeout(10 * time.Second).Should(BeTrue())
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "x"}))

		// x's renewals are refused: within two thirds of its 2 s it sees
		// itself gone, a does after 2 s, and x says so in its metric.
		Eventually(x.Member).WithTimeout(10 * time.Second).Should(BeFalse())
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a"}))
		Expect(a.stop()).To(Succeed())
		Eventually(func() float64 { return gauge("mcpbridge_replica_member") }).WithTimeout(10 * time.Second).Should(BeZero())
		Expect(x.exited).NotTo(BeClosed(), "x keeps trying to renew")
	})

	It("tells a replica which live peers report that they cannot reach it, and its subscribers when that changes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		a := startReplica(ns, "a")
		changes := a.Subscribe()
		var report atomic.Pointer[string]
		report.Store(ptr.To(""))
		b := startReplica(ns, "b", withUnreachableReport(func() string { return *report.Load() }))
		Eventually(memberNames(a)).WithTimeout(10 * time.Second).Should(Equal([]string{"a", "b"}))
		Eventually(changes).Should(Receive(leaseOf("b")), "b joined")
		Expect(a.UnreachedBy()).To(BeEmpty())

		// b cannot reach a (nor aa, a replica whose name starts like a's).
		report.Store(ptr.To("aa at 10.0.0.2:8091 since 2026-12-03T00:00:00Z: connection refused; " +
			"a at 10.0.0.1:8091 since 2026-12-03T00:00:00Z: connection refused"))
		Eventually(a.UnreachedBy).WithTimeout(10 * time.Second).Should(Equal([]string{"b"}))
		Eventually(changes).Should(Receive(leaseOf("a")), "a's subscribers learn that b cannot reach a")
		// b reaches a again: b stays among them for three durations (6 s),
		// so that a reach that flaps costs no write per renewal.
		report.Store(ptr.To("aa at 10.0.0.2:8091 since 2026-12-03T00:00:00Z: connection refused"))
		Consistently(a.UnreachedBy).WithTimeout(time.Second).Should(Equal([]string{"b"}), "b is dropped at once")
		Eventually(a.UnreachedBy).WithTimeout(10*time.Second).Should(BeEmpty(), "b reaches a again")
		Eventually(changes).Should(Receive(leaseOf("a")), "and a's subscribers learn it")

		report.Store(ptr.To("a at 10.0.0.1:8091 since 2026-12-03T00:00:00Z: connection refused"))
		Eventually(a.UnreachedBy).WithTimeout(10 * time.Second).Should(Equal([]string{"b"}))
		b.crash()
		Eventually(a.UnreachedBy).WithTimeout(10*time.Second).Should(BeEmpty(), "the report of a replica that is gone counts no more")
	})
})

// leaseWriterWithoutUpdate is a client for a replica whose RBAC lets it
// create its Lease but never renew it.
func leaseWriterWithoutUpdate(ctx context.Context, ns string) kubernetes.Interface {
	GinkgoHelper()
	const user = "replica-without-update"
	Expect(env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "delete"}}}})).To(Succeed())
	Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leases"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	// The apiserver's authorizer sees the binding through its own informer,
	// a moment later; a replica refused by RBAC gives up at once (waiting
	// would not help it in a cluster), so the replica starts only after.
	Eventually(func() error {
		_, err := c.CoordinationV1().Leases(ns).Get(ctx, "not-there", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}).WithTimeout(10 * time.Second).Should(Succeed())
	return c
}

// gauge reads a gauge without labels from the manager's registry.
func gauge(name string) float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	Fail("no gauge " + name)
	return 0
}

// leaseOf matches a membership event about the replica's Lease.
func leaseOf(replica string) OmegaMatcher {
	return WithTransform(func(e event.GenericEvent) string {
		l, ok := e.Object.(*coordinationv1.Lease)
		if !ok {
			return ""
		}
		return l.Name + "/" + ptr.Deref(l.Spec.HolderIdentity, "")
	}, Equal(membership.LeaseName(replica)+"/"+replica))
}
