package controller_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// slowClosePrefix names resources whose supervisors the suite gives a 300 ms
// close barrier and a 1.5 s terminate grace (see startManager).
const slowClosePrefix = "slowclose"

// A replaced or deleted supervisor whose server outlives the close barrier
// stays registered until the server is gone: a hot swap or a re-created
// resource gets its new server only then, and status says CloseTimeout
// meanwhile. The servers ignore SIGTERM (the fixture exits on stdin EOF, its
// shell then sleeps with SIGTERM ignored) and carry a marker in their
// environment, so that every child of this process that belongs to the
// resource is seen in /proc.
var _ = Describe("The close barrier across supervisors", func() {

	slowCloseServer := func(ns, name, marker string) *v1alpha1.McpServer {
		obj := stdioServer(ns, name)
		obj.Spec.Stdio.Command = "/bin/sh"
		obj.Spec.Stdio.Args = []string{"-c", `trap "" TERM; "$0" "$@"; exec sleep 3600`, fixtureBin, "--ignore-sigterm"}
		markName, markValue, _ := strings.Cut(marker, "=")
		obj.Spec.Stdio.Env = []corev1.EnvVar{{Name: markName, Value: markValue}}
		return obj
	}
	watch := func(marker string) *fixture.ChildWatch {
		w := fixture.WatchChildren(marker)
		DeferCleanup(w.Stop)
		return w
	}
	// expectOneAtATime deletes the resource (its disposal may outlive the
	// spec: Stop SIGKILLs the server) and checks what the watch saw.
	expectOneAtATime := func(ctx context.Context, w *fixture.ChildWatch, ns, name string) {
		Expect(k8s.Delete(ctx, get(ns, name))).To(Succeed())
		key := client.ObjectKey{Namespace: ns, Name: name}
		Eventually(func() bool { return sups.Get(key) == nil }, eventuallyTimeout, poll).Should(BeTrue())
		w.Stop()
		maxAlive, worst, distinct := w.Result()
		GinkgoWriter.Printf("%d server processes seen, at most %d at once\n", distinct, maxAlive)
		Expect(distinct).To(Equal(2), "the watch saw the old and the new server")
		Expect(maxAlive).To(Equal(1), "server processes %v lived at once", worst)
	}
	closeTimeoutInStatus := func(ns, name string) func(Gomega) {
		return func(g Gomega) {
			c := meta(get(ns, name), v1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonCloseTimeout))
			g.Expect(c.Message).To(ContainSubstring("did not close within its close barrier"))
		}
	}

	It("holds a hot swap until the old server is gone", func(ctx SpecContext) {
		ns := newNamespace()
		name := slowClosePrefix + "-swap"
		marker := "MCPBRIDGE_CLOSE_BARRIER=" + ns
		w := watch(marker)
		Expect(k8s.Create(ctx, slowCloseServer(ns, name, marker))).To(Succeed())
		before := readyAt(ns, name, 1)

		before.Annotations = map[string]string{v1alpha1.RestartedAtAnnotation: "swap"}
		Expect(k8s.Update(ctx, before)).To(Succeed())
		Eventually(closeTimeoutInStatus(ns, name), eventuallyTimeout, poll).Should(Succeed())
		Expect(get(ns, name).Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Eventually(hasEvent(ns, name, v1alpha1.ReasonCloseTimeout, ""), eventuallyTimeout, poll).Should(BeTrue())

		after := readyAt(ns, name, before.Status.ConnectionGeneration+1)
		Expect(after.Status.ConnectionGeneration).To(Equal(before.Status.ConnectionGeneration + 1))
		expectOneAtATime(ctx, w, ns, name)
	})

	It("holds a re-created resource until the deleted one's server is gone", func(ctx SpecContext) {
		ns := newNamespace()
		name := slowClosePrefix + "-recreate"
		marker := "MCPBRIDGE_CLOSE_BARRIER=" + ns
		w := watch(marker)
		Expect(k8s.Create(ctx, slowCloseServer(ns, name, marker))).To(Succeed())
		readyAt(ns, name, 1)
		key := client.ObjectKey{Namespace: ns, Name: name}

		Expect(k8s.Delete(ctx, get(ns, name))).To(Succeed())
		// The deletion was reconciled: the supervisor is being disposed.
		Eventually(func() bool { return sups.Get(key) == nil }, eventuallyTimeout, poll).Should(BeTrue())
		Expect(k8s.Create(ctx, slowCloseServer(ns, name, marker))).To(Succeed())
		Eventually(closeTimeoutInStatus(ns, name), eventuallyTimeout, poll).Should(Succeed())

		readyAt(ns, name, 1)
		expectOneAtATime(ctx, w, ns, name)
	})
})
