package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

var _ = Describe("Status economy", func() {
	It("takes at most 4 status writes from create to Ready and none while idle and healthy", func() {
		ctx := context.Background()
		ns := newNamespace()
		w := watchMcpServers(ns)

		obj := stdioServer(ns, "fx")
		// Probes run (six in the idle window below), status stays still. A
		// probe may take half the interval: 50 ms (at 100 ms) timed out
		// twice in a row under -race on a loaded machine, a real loss.
		obj.Spec.HealthCheckIntervalMs = ptr32(500)
		Expect(k8s.Create(ctx, obj)).To(Succeed())

		writes := 0
		untilPhase(w, v1alpha1.PhaseReady, func(ev watch.Event) {
			if ev.Type == watch.Modified {
				writes++
			}
		})
		GinkgoWriter.Printf("status writes from create to Ready: %d\n", writes)
		Expect(writes).To(BeNumerically("<=", 4))

		Consistently(w.ResultChan(), 3*time.Second, 50*time.Millisecond).ShouldNot(Receive(),
			"an idle, healthy resource gets no status writes")
	})
})
