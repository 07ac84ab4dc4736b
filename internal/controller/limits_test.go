package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// The administrator's floors and ceilings (docs/design.md, "Budgets" and "Limits"): a spec beyond one
// is Invalid with a message naming the flag, and never connects.
var _ = Describe("Floors and ceilings of the manager", func() {
	DescribeTable("refuse a spec beyond them, naming the flag",
		func(ctx SpecContext, mod func(*v1alpha1.McpServer), fieldPath, flag string) {
			ns := newNamespace()
			obj := stdioServer(ns, "limited")
			mod(obj)
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			Eventually(func(g Gomega) {
				got := &v1alpha1.McpServer{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
				g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseInvalid))
				c := meta(got, v1alpha1.ConditionReady)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
				g.Expect(c.Message).To(ContainSubstring(fieldPath))
				g.Expect(c.Message).To(ContainSubstring(flag))
			}, eventuallyTimeout, poll).Should(Succeed())
			Expect(registry.Tools(ns)).To(BeEmpty(), "a refused spec publishes no tool")
		},
		Entry("a reconnect delay under --min-reconnect-delay",
			func(o *v1alpha1.McpServer) { o.Spec.Reconnect.InitialDelayMs = ptr32(1) },
			"spec.reconnect.initialDelayMs", policy.FlagMinReconnectDelay+"="+suiteLimits.MinReconnectDelay.String()),
		Entry("a health check under --min-health-check-interval",
			func(o *v1alpha1.McpServer) { o.Spec.HealthCheckIntervalMs = ptr32(1) },
			"spec.healthCheckIntervalMs", policy.FlagMinHealthCheckInterval+"="+suiteLimits.MinHealthCheckInterval.String()),
		Entry("a tool call timeout over --max-tool-call-timeout",
			func(o *v1alpha1.McpServer) { o.Spec.ToolCallTimeoutMs = ptr32(2_073_600_000) }, // 24 days
			"spec.toolCallTimeoutMs", policy.FlagMaxToolCallTimeout+"="+suiteLimits.MaxToolCallTimeout.String()),
		Entry("a connection timeout over --max-connection-timeout",
			func(o *v1alpha1.McpServer) { o.Spec.ConnectionTimeoutMs = ptr32(2 * 3_600_000) },
			"spec.connectionTimeoutMs", policy.FlagMaxConnectionTimeout+"="+suiteLimits.MaxConnectionTimeout.String()),
	)
})

// The servers of a namespace share one pace for what they stream besides
// answers, and one budget of the bytes being read from them
// (docs/design.md, "Budgets"), held while they run.
var _ = Describe("What the servers of a namespace share", func() {
	It("is held by each server of the namespace until it is deleted", func(ctx SpecContext) {
		ns := newNamespace()
		objs := []*v1alpha1.McpServer{stdioServer(ns, "one"), stdioServer(ns, "two")}
		for _, obj := range objs {
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			Eventually(phaseOf(ns, obj.Name), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseReady))
		}
		Expect(sups.ShareHolders(ns)).To(Equal(2))
		for _, obj := range objs {
			Expect(k8s.Delete(ctx, obj)).To(Succeed())
		}
		Eventually(func() int { return sups.ShareHolders(ns) }, eventuallyTimeout, poll).Should(BeZero())
	})
})
