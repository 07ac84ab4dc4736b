package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/argocd"
)

// updateHealthTestdata set to 1 makes the health specs write the objects
// they judge into test/argocd/testdata, the table of Argo CD-style health
// tests that runs without a control plane.
const updateHealthTestdata = "UPDATE_HEALTH_TESTDATA"

// Argo CD runs config/argocd/health.lua on every McpServer of an
// application, Flux computes kstatus: on the same live objects, in every
// phase, both must give the verdict the phase means, and agree.
// See docs/integrations.md.
var _ = Describe("Argo CD and Flux health", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("is Progressing before status and while a new generation is unobserved, Healthy when Ready", func(ctx SpecContext) {
		w := watchMcpServers(ns)
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		created := nextEvent(w, func(m *v1alpha1.McpServer) bool { return true })
		// The CRD's default status: kstatus's generic rule would call an
		// object without status Current, before the operator wrote any.
		Expect(created.Status.ObservedGeneration).To(BeEquivalentTo(-1), "the create event carries the CRD's default status")
		Expect(created.Status.Phase).To(BeEmpty())
		expectHealth(created, "unwritten", "Progressing", status.InProgressStatus)

		ready := readyAt(ns, "fx", 1)
		expectHealth(ready, "ready", "Healthy", status.CurrentStatus)
		expectPhaseSeries(ns, "fx", v1alpha1.PhaseReady)

		// The spec edit's own event carries the status of the generation
		// before: the operator has not looked at the new one yet.
		ready.Spec.Stdio.Args = []string{"--server-version=2.0.0"}
		Expect(k8s.Update(ctx, ready)).To(Succeed())
		unobserved := nextEvent(w, func(m *v1alpha1.McpServer) bool { return m.Generation == ready.Generation })
		Expect(unobserved.Status.ObservedGeneration).To(BeNumerically("<", unobserved.Generation))
		Expect(unobserved.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		expectHealth(unobserved, "generation-not-observed", "Progressing", status.InProgressStatus)
	})

	It("is Progressing while connecting and while reconnecting", func(ctx SpecContext) {
		slow := stdioServer(ns, "connecting", "--stall-initialize")
		slow.Spec.ConnectionTimeoutMs = ptr32(60000)
		Expect(k8s.Create(ctx, slow)).To(Succeed())
		Eventually(phaseOf(ns, "connecting"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseConnecting))
		expectHealth(get(ns, "connecting"), "connecting", "Progressing", status.InProgressStatus)
		expectPhaseSeries(ns, "connecting", v1alpha1.PhaseConnecting)

		// Killed after connecting, the server waits a minute for its next
		// attempt: Reconnecting long enough to be read.
		events := filepath.Join(GinkgoT().TempDir(), "events")
		obj := stdioServer(ns, "reconnecting", "--events-file="+events)
		obj.Spec.Reconnect.InitialDelayMs, obj.Spec.Reconnect.MaxDelayMs = ptr32(60000), ptr32(60000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		readyAt(ns, "reconnecting", 1)
		Expect(syscall.Kill(lifetimes(events)[0].PID, syscall.SIGKILL)).To(Succeed())
		Eventually(phaseOf(ns, "reconnecting"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseReconnecting))
		expectHealth(get(ns, "reconnecting"), "reconnecting", "Progressing", status.InProgressStatus)
		expectPhaseSeries(ns, "reconnecting", v1alpha1.PhaseReconnecting)
	})

	It("is Degraded when Failed, Invalid or in Conflict, saying why", func(ctx SpecContext) {
		loop := stdioServer(ns, "failed", "--crash-after-initialize")
		loop.Spec.Reconnect.MaxAttempts = ptr32(2)
		Expect(k8s.Create(ctx, loop)).To(Succeed())
		Eventually(phaseOf(ns, "failed"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseFailed))
		failed := get(ns, "failed")
		Expect(failed.Status.LastError).NotTo(BeNil())
		hs := expectHealth(failed, "failed", "Degraded", status.FailedStatus)
		Expect(hs.Message).To(HavePrefix("ReconnectExhausted: Gave up after 2 consecutive failed attempts"))
		Expect(hs.Message).To(HaveSuffix("; last error (" + failed.Status.LastError.Stage + "): " + failed.Status.LastError.Message))
		expectPhaseSeries(ns, "failed", v1alpha1.PhaseFailed)

		// A Pod-only field on a server that runs Local: the CRD accepts
		// it, the resolve step does not.
		bad := stdioServer(ns, "invalid")
		bad.Spec.Stdio.ServiceAccountName = "robot"
		Expect(k8s.Create(ctx, bad)).To(Succeed())
		Eventually(phaseOf(ns, "invalid"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseInvalid))
		hs = expectHealth(get(ns, "invalid"), "invalid", "Degraded", status.FailedStatus)
		Expect(hs.Message).To(HavePrefix("InvalidSpec: "))
		Expect(hs.Message).To(ContainSubstring("spec.stdio.serviceAccountName"))
		expectPhaseSeries(ns, "invalid", v1alpha1.PhaseInvalid)

		first := stdioServer(ns, "a-holder") // the oldest holds a serverName, then the first name
		first.Spec.ServerName = "shared"
		Expect(k8s.Create(ctx, first)).To(Succeed())
		readyAt(ns, "a-holder", 1)
		second := stdioServer(ns, "conflict")
		second.Spec.ServerName = "shared"
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(phaseOf(ns, "conflict"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseConflict))
		hs = expectHealth(get(ns, "conflict"), "conflict", "Degraded", status.FailedStatus)
		Expect(hs.Message).To(HavePrefix("ServerNameConflict: "))
		expectPhaseSeries(ns, "conflict", v1alpha1.PhaseConflict)

		// A deleted server's phase series goes with it.
		Expect(k8s.Delete(ctx, get(ns, "conflict"))).To(Succeed())
		Eventually(func() []string { return phaseSeries(ns, "conflict") }, eventuallyTimeout, poll).Should(BeEmpty())
	})

	It("is Healthy while idle, saying so", func(ctx SpecContext) {
		Expect(k8s.Create(ctx, withIdle(stdioServer(ns, "idle-fx")))).To(Succeed())
		readyAt(ns, "idle-fx", 1)
		hs := expectHealth(suspended(ns, "idle-fx"), "idle", "Healthy", status.CurrentStatus)
		Expect(hs.Message).To(ContainSubstring("Idle"))
		expectPhaseSeries(ns, "idle-fx", v1alpha1.PhaseIdle)
	})
})

// healthScript is config/argocd/health.lua, read once.
var healthScript = sync.OnceValues(argocd.Script)

// expectHealth runs the shipped Argo CD health check and kstatus on obj:
// Argo CD must say want, kstatus wantKstatus, and the two must agree.
// With UPDATE_HEALTH_TESTDATA=1 the object is saved as
// test/argocd/testdata/<name>.yaml.
func expectHealth(obj *v1alpha1.McpServer, name, want string, wantKstatus status.Status) argocd.HealthStatus {
	GinkgoHelper()
	script, err := healthScript()
	Expect(err).NotTo(HaveOccurred())
	u, err := argocd.Unstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	hs, err := argocd.Health(context.Background(), script, u)
	Expect(err).NotTo(HaveOccurred())
	Expect(hs.Status).To(Equal(want), "Argo CD's verdict on %s: %s", name, hs.Message)
	Expect(hs.Message).NotTo(BeEmpty())
	ks, err := argocd.Kstatus(u)
	Expect(err).NotTo(HaveOccurred())
	Expect(ks).To(Equal(wantKstatus), "kstatus on %s", name)
	Expect(argocd.Agrees[hs.Status]).To(Equal(ks), "Argo CD and kstatus disagree on %s", name)
	if os.Getenv(updateHealthTestdata) == "1" {
		saveHealthObject(name, u)
	}
	return hs
}

func saveHealthObject(name string, u map[string]any) {
	root, err := testenv.ModuleRoot()
	Expect(err).NotTo(HaveOccurred())
	b, err := yaml.Marshal(u)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(root, "test", "argocd", "testdata", name+".yaml")
	header := "# Captured from the controller's envtest suite (internal/controller/health_test.go,\n" +
		"# " + updateHealthTestdata + "=1); test/argocd/testdata/health_test.yaml judges it.\n"
	Expect(os.WriteFile(path, append([]byte(header), b...), 0o644)).To(Succeed())
}

// nextEvent returns the first McpServer of w's events that match accepts.
func nextEvent(w watch.Interface, match func(*v1alpha1.McpServer) bool) *v1alpha1.McpServer {
	GinkgoHelper()
	var got *v1alpha1.McpServer
	Eventually(w.ResultChan(), eventuallyTimeout).Should(Receive(Satisfy(func(ev watch.Event) bool {
		m, ok := ev.Object.(*v1alpha1.McpServer)
		if ok && match(m) {
			got = m
		}
		return got != nil
	})))
	return got
}

// expectPhaseSeries waits until mcpbridge_server_phase holds exactly one
// series for the server: its phase, with value 1.
func expectPhaseSeries(ns, name string, phase v1alpha1.Phase) {
	GinkgoHelper()
	Eventually(func() []string { return phaseSeries(ns, name) }, eventuallyTimeout, poll).
		Should(Equal([]string{string(phase) + "=1"}))
}

// phaseSeries lists the server's mcpbridge_server_phase series as phase=value.
func phaseSeries(ns, name string) []string {
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, f := range families {
		if f.GetName() != "mcpbridge_server_phase" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["name"] == name {
				out = append(out, labels["phase"]+"="+strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64))
			}
		}
	}
	return out
}
