package controller_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// See docs/design.md, "Egress policy".
var _ = Describe("Egress policy", func() {
	ctx := context.Background()

	It("refuses upstreams at loopback and link-local addresses, naming the address and the flag in status", func() {
		ns := newNamespace()
		v4 := serveFixture("tcp4", "127.0.0.1:0")
		v6 := serveFixture("tcp6", "[::1]:0")
		_, p4, _ := net.SplitHostPort(v4.Listener.Addr().String())
		_, p6, _ := net.SplitHostPort(v6.Listener.Addr().String())

		refused := func(name, url, addr, class string) {
			obj := httpServer(ns, name, url)
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			Eventually(func(g Gomega) {
				got := get(ns, name)
				g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
				g.Expect(got.Status.FailedAttempts).To(BeNumerically(">=", 1))
				g.Expect(got.Status.LastError).To(Equal(&v1alpha1.LastError{Stage: "transport-start",
					Message: "Refused to connect to " + addr + ": " + class +
						" addresses are not allowed for upstreams; an administrator can allow them with --upstream-allow-cidrs"}))
			}, eventuallyTimeout, poll).Should(Succeed())
		}
		// Loopback first: had the guard not been in the dial path, these
		// fail and the spec ends before anything aims off this machine.
		refused(refusedPrefix+"localhost", "http://localhost:"+p4+"/mcp", "127.0.0.1:"+p4, "loopback")
		refused(refusedPrefix+"ipv6", "http://[::1]:"+p6+"/mcp", "[::1]:"+p6, "loopback")
		refused(refusedPrefix+"metadata", "http://169.254.169.254/latest/mcp", "169.254.169.254:80", "link-local")

		// The suite's manager allows 127.0.0.0/8 and ::1/128 for every
		// other name, as --upstream-allow-cidrs=127.0.0.0/8,::1/128 does.
		Expect(k8s.Create(ctx, httpServer(ns, "allowed", "http://localhost:"+p4+"/mcp"))).To(Succeed())
		Expect(toolNames(readyAt(ns, "allowed", 1))).To(ContainElement("mcp__allowed__echo"))
		Expect(egressViolations.Load()).To(BeZero())
	})
})

// serveFixture serves the fixture's Streamable HTTP handler on a loopback
// listener until the spec ends.
func serveFixture(network, addr string) *httptest.Server {
	fx, err := fixture.NewHTTPHandler(fixture.Options{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(fx.Close)
	ln, err := net.Listen(network, addr)
	Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewUnstartedServer(http.Handler(fx))
	srv.Listener = ln
	srv.Start()
	DeferCleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// httpServer is an McpServer connecting to url with the test-sized delays
// of stdioServer; it is deleted, and its supervisor gone, before the
// upstreams registered earlier close.
func httpServer(ns, name, url string) *v1alpha1.McpServer {
	obj := stdioServer(ns, name)
	obj.Spec.Transport, obj.Spec.Stdio = v1alpha1.TransportStreamableHTTP, nil
	obj.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: url}
	obj.Spec.Reconnect.MaxAttempts = ptr32(1000)
	DeferCleanup(func() {
		Expect(k8s.Delete(context.Background(), obj)).To(Succeed())
		Eventually(func() bool { return sups.Get(client.ObjectKeyFromObject(obj)) == nil }, eventuallyTimeout, poll).Should(BeTrue())
	})
	return obj
}
