package manager_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// TestUpstreamAllowCIDRs runs the manager binary as deployed (no
// --upstream-allow-cidrs: loopback refused) and then as `make demo` runs it
// (--upstream-allow-cidrs=127.0.0.0/8): the same McpServer at
// http://localhost:<port> is refused, with the address and the flag in
// status, and then connects. Only loopback is ever aimed at here: the
// binary has no test hook to catch a broken guard.
// See docs/design.md, "Egress policy".
func TestUpstreamAllowCIDRs(t *testing.T) {
	fx, err := fixture.NewHTTPHandler(fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fx.Close() })
	up := httptest.NewServer(fx)
	t.Cleanup(func() {
		up.CloseClientConnections()
		up.Close()
	})
	port := up.URL[strings.LastIndex(up.URL, ":")+1:]

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "egress-"}}
	if err := env.Client.Create(ctx(t), ns); err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "local"},
		Spec: v1alpha1.McpServerSpec{
			Transport:      v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: "http://localhost:" + port + "/mcp"},
			Reconnect:      &v1alpha1.ReconnectPolicy{InitialDelayMs: ptr32(100), MaxDelayMs: ptr32(500)},
		},
	}
	if err := env.Client.Create(ctx(t), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
	status := func() v1alpha1.McpServerStatus {
		got := &v1alpha1.McpServer{}
		if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}

	t.Run("refused by default", func(t *testing.T) {
		probes := freeAddr(t)
		startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-bind-address=0",
			"--gateway-bind-address="+freeAddr(t), "--gateway-tls=false", "--health-probe-bind-address="+probes)
		NewWithT(t).Eventually(func(g Gomega) {
			st := status()
			g.Expect(st.LastError).To(Equal(&v1alpha1.LastError{Stage: "transport-start",
				Message: "Refused to connect to 127.0.0.1:" + port + ": loopback addresses are not allowed for upstreams; " +
					"an administrator can allow them with --upstream-allow-cidrs"}))
			g.Expect(st.Phase).To(Equal(v1alpha1.PhaseConnecting))
		}, time.Minute, 100*time.Millisecond).Should(Succeed())
	})

	t.Run("connects with --upstream-allow-cidrs=127.0.0.0/8", func(t *testing.T) {
		probes := freeAddr(t)
		startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-bind-address=0",
			"--gateway-bind-address="+freeAddr(t), "--gateway-tls=false", "--health-probe-bind-address="+probes,
			"--upstream-allow-cidrs=127.0.0.0/8")
		NewWithT(t).Eventually(func(g Gomega) {
			st := status()
			g.Expect(st.Phase).To(Equal(v1alpha1.PhaseReady))
			g.Expect(st.ToolCount).To(BeNumerically(">", 0))
		}, time.Minute, 100*time.Millisecond).Should(Succeed())
	})
}

func ptr32(v int32) *int32 { return &v }
