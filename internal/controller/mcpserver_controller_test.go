package controller_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

var _ = Describe("McpServer lifecycle", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("connects, publishes tools to status, and is Current for kstatus", func(ctx SpecContext) {
		obj := stdioServer(ns, "fx", "--tools=3")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		ready := readyAt(ns, "fx", 1)
		Expect(ready.Status.ServerName).To(Equal("fx"))
		Expect(ready.Status.Replica).To(Equal(replicaName), "the replica that runs its supervisor")
		Expect(ready.Status.ToolCount).To(BeNumerically(">=", 3))
		Expect(toolNames(ready)).To(ContainElements("mcp__fx__echo", "mcp__fx__tool_0000"))
		Expect(ready.Status.ServerInfo.Name).To(Equal("mcp-fixture"))
		Expect(kstatusOf(ready)).To(Equal(status.CurrentStatus))
		// Events are sent by the recorder's own goroutine, after the status
		// patch that made it Ready: wait for it rather than race it.
		Eventually(hasEvent(ns, "fx", "Connected", "generation 1"), eventuallyTimeout, poll).Should(BeTrue())
		Eventually(func() float64 { v, _ := metricValue("mcpbridge_connection_up", ns, "fx"); return v }).Should(Equal(1.0))
		tools, _ := metricValue("mcpbridge_published_tools", ns, "fx")
		Expect(tools).To(BeEquivalentTo(ready.Status.ToolCount))

		out, _, err := env.Kubectl(ctx, "get", "mcpservers", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`fx\s+fx\s+stdio\s+Ready\s+\d+\s+0\s+1\s`))
	})

	It("is InProgress for kstatus while connecting", func(ctx SpecContext) {
		obj := stdioServer(ns, "slow", "--stall-initialize")
		obj.Spec.ConnectionTimeoutMs = ptr32(60000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		Eventually(phaseOf(ns, "slow"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseConnecting))
		connecting := get(ns, "slow")
		Expect(kstatusOf(connecting)).To(Equal(status.InProgressStatus))
		Expect(meta(connecting, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	})

	It("reconnects after the server is killed, with the next generation and identical tools", func(ctx SpecContext) {
		events := filepath.Join(GinkgoT().TempDir(), "events")
		obj := stdioServer(ns, "fx", "--events-file="+events)
		// Killed well inside its stability window, the first connection is
		// the outage's failed attempt 1, so the retry is attempt 2.
		obj.Spec.Reconnect.MaxDelayMs = ptr32(60000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		before := readyAt(ns, "fx", 1)
		pid := lifetimes(events)[0].PID
		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		Eventually(hasEvent(ns, "fx", "Reconnecting", "in 50ms (attempt 2/4)"), eventuallyTimeout, poll).Should(BeTrue())
		after := readyAt(ns, "fx", before.Status.ConnectionGeneration+1)
		Expect(after.Status.ConnectionGeneration).To(Equal(before.Status.ConnectionGeneration + 1))
		Expect(toolNames(after)).To(Equal(toolNames(before)))
		Eventually(hasEvent(ns, "fx", "Recovered", ""), eventuallyTimeout, poll).Should(BeTrue())
		attempts, _ := metricValue("mcpbridge_reconnect_attempts_total", ns, "fx")
		Expect(attempts).To(BeNumerically(">=", 1))
		out, _, err := env.Kubectl(ctx, "describe", "mcpserver", "fx", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Reconnecting"))
		Expect(out).To(ContainSubstring("Recovered"))
	})

	It("stops after a crash loop exhausts the budget and connects again on restartedAt", func(ctx SpecContext) {
		obj := stdioServer(ns, "loop", "--crash-after-initialize")
		// A stability window far longer than any brief connection, even on
		// a loaded machine: each one must count against the same budget.
		obj.Spec.Reconnect.MaxDelayMs = ptr32(60000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		Eventually(phaseOf(ns, "loop"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseFailed))
		failed := get(ns, "loop")
		ready := meta(failed, v1alpha1.ConditionReady)
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonReconnectExhausted))
		// Every brief connection was a failed attempt, the first included.
		Expect(failed.Status.FailedAttempts).To(BeEquivalentTo(4))
		Expect(failed.Status.ConnectionGeneration).To(BeEquivalentTo(4))
		Expect(ready.Message).To(HavePrefix("Gave up after 4 consecutive failed attempts (reconnect.maxAttempts is 4)"))
		Expect(failed.Status.Tools).To(BeEmpty())
		Expect(registry.Tools(ns)).To(BeEmpty())
		Expect(kstatusOf(failed)).To(Equal(status.FailedStatus))
		Eventually(hasEvent(ns, "loop", "ReconnectExhausted", ""), eventuallyTimeout, poll).Should(BeTrue())

		// The way back: a healthy command and a restartedAt annotation.
		latest := get(ns, "loop")
		latest.Annotations = map[string]string{v1alpha1.RestartedAtAnnotation: "now"}
		latest.Spec.Stdio.Args = nil
		Expect(k8s.Update(ctx, latest)).To(Succeed())
		again := readyAt(ns, "loop", failed.Status.ConnectionGeneration+1)
		Expect(again.Status.Tools).NotTo(BeEmpty())
	})

	It("reconnects on a restartedAt annotation alone", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		before := readyAt(ns, "fx", 1)
		before.Annotations = map[string]string{v1alpha1.RestartedAtAnnotation: time.Now().Format(time.RFC3339Nano)}
		Expect(k8s.Update(ctx, before)).To(Succeed())
		readyAt(ns, "fx", before.Status.ConnectionGeneration+1)
	})

	It("hot-swaps on a spec edit without overlapping children and renames tools on a serverName edit", func(ctx SpecContext) {
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, stdioServer(ns, "fx", "--events-file="+events))).To(Succeed())
		before := readyAt(ns, "fx", 1)
		obj := get(ns, "fx")
		obj.Spec.Stdio.Args = append(obj.Spec.Stdio.Args, "--server-version=2.0.0")
		Expect(k8s.Update(ctx, obj)).To(Succeed())
		var after *v1alpha1.McpServer
		Eventually(func(g Gomega) {
			after = get(ns, "fx")
			g.Expect(after.Status.ServerInfo).NotTo(BeNil())
			g.Expect(after.Status.ServerInfo.Version).To(Equal("2.0.0"))
			g.Expect(after.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		}, eventuallyTimeout, poll).Should(Succeed())
		Expect(after.Status.ConnectionGeneration).To(Equal(before.Status.ConnectionGeneration + 1))
		Expect(toolNames(after)).To(Equal(toolNames(before)))
		lts := lifetimes(events)
		Expect(lts).To(HaveLen(2))
		Expect(lts[0].End.IsZero()).To(BeFalse(), "the first child must have exited")
		Expect(lts[0].End.Before(lts[1].Start)).To(BeTrue(), "the old child ended %v, the new one started %v", lts[0].End, lts[1].Start)

		after.Spec.ServerName = "renamed"
		Expect(k8s.Update(ctx, after)).To(Succeed())
		Eventually(func(g Gomega) {
			r := get(ns, "fx")
			g.Expect(r.Status.Phase).To(Equal(v1alpha1.PhaseReady))
			g.Expect(toolNames(r)).To(ContainElement("mcp__renamed__echo"))
			g.Expect(toolNames(r)).NotTo(ContainElement("mcp__fx__echo"))
		}, eventuallyTimeout, poll).Should(Succeed())
	})

	It("removes the child and the tools when the resource is deleted", func(ctx SpecContext) {
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, stdioServer(ns, "fx", "--events-file="+events))).To(Succeed())
		readyAt(ns, "fx", 1)
		Expect(registry.Tools(ns)).NotTo(BeEmpty())
		pid := lifetimes(events)[0].PID
		Expect(k8s.Delete(ctx, get(ns, "fx"))).To(Succeed())
		Eventually(func() error { return syscall.Kill(pid, 0) }, 5*time.Second, poll).Should(MatchError(syscall.ESRCH))
		Eventually(func() int { return len(registry.Tools(ns)) }, 5*time.Second, poll).Should(BeZero())
	})
})

var _ = Describe("Secrets", func() {

	It("waits for a missing Secret, connects when it appears, and hot-swaps when it rotates", func(ctx SpecContext) {
		ns := newNamespace()
		obj := stdioServer(ns, "fx")
		obj.Spec.Stdio.Env = []corev1.EnvVar{{Name: "FIXTURE_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "value"}}}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		Eventually(func(g Gomega) {
			c := meta(get(ns, "fx"), v1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSecretNotFound))
			g.Expect(c.Message).To(ContainSubstring(`Secret "token"`))
		}, eventuallyTimeout, poll).Should(Succeed())

		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"},
			Data: map[string][]byte{"value": []byte("first-secret-value")}}
		Expect(k8s.Create(ctx, secret)).To(Succeed())
		ready := readyAt(ns, "fx", 1)
		Expect(childEnv(ns, "fx")).To(ContainSubstring("FIXTURE_TOKEN=first-secret-value"))

		secret.Data["value"] = []byte("second-secret-value")
		Expect(k8s.Update(ctx, secret)).To(Succeed())
		readyAt(ns, "fx", ready.Status.ConnectionGeneration+1)
		Expect(childEnv(ns, "fx")).To(ContainSubstring("FIXTURE_TOKEN=second-secret-value"))

		// No secret value in status or events.
		raw := describe(get(ns, "fx")) + strings.Join(eventsFor(ns, "fx"), "\n")
		st := get(ns, "fx").Status
		for _, c := range st.Conditions {
			raw += c.Message
		}
		Expect(raw).NotTo(ContainSubstring("secret-value"))
	})
})

var _ = Describe("serverName ownership", func() {

	It("lets the oldest resource hold a serverName and hands it over when it is deleted", func(ctx SpecContext) {
		ns := newNamespace()
		older := stdioServer(ns, "first")
		older.Spec.ServerName = "shared"
		Expect(k8s.Create(ctx, older)).To(Succeed())
		readyAt(ns, "first", 1)
		newer := stdioServer(ns, "second")
		newer.Spec.ServerName = "shared"
		Expect(k8s.Create(ctx, newer)).To(Succeed())
		Eventually(phaseOf(ns, "second"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseConflict))
		c := meta(get(ns, "second"), v1alpha1.ConditionReady)
		Expect(c.Reason).To(Equal(v1alpha1.ReasonServerNameConflict))
		Expect(c.Message).To(ContainSubstring(`"first"`))
		Eventually(hasEvent(ns, "second", "ServerNameConflict", ""), eventuallyTimeout, poll).Should(BeTrue())

		Expect(k8s.Delete(ctx, get(ns, "first"))).To(Succeed())
		readyAt(ns, "second", 1)
		// The holder's tools may leave the registry a moment after the
		// takeover connects; the refused swap is retried by itself.
		Eventually(func() []string { return toolNames(get(ns, "second")) }, eventuallyTimeout, poll).
			Should(ContainElement("mcp__shared__echo"))
	})
})

// meta finds a condition.
func meta(obj *v1alpha1.McpServer, t string) *metav1.Condition {
	for i := range obj.Status.Conditions {
		if obj.Status.Conditions[i].Type == t {
			return &obj.Status.Conditions[i]
		}
	}
	return nil
}

// childEnv calls the fixture's env tool through the supervisor.
func childEnv(ns, name string) string {
	sup := sups.Get(client.ObjectKey{Namespace: ns, Name: name})
	Expect(sup).NotTo(BeNil())
	var text string
	Eventually(func() error {
		res, err := sup.CallTool(context.Background(), "env", nil)
		if err == nil {
			text = textOf(res)
		}
		return err
	}, eventuallyTimeout, poll).Should(Succeed())
	return text
}
