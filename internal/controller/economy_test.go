package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mcpbridge/operator/api/v1alpha1"
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
