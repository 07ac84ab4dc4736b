package controller_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/test/fixture"
)

// See docs/design.md, "Egress policy".
var _ = Describe("Egress policy", func() {

	It("refuses upstreams at loopback and link-local addresses, naming the address and the flag in status", func(ctx SpecContext) {
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

// See docs/design.md, "Egress policy": the in-cluster rule, against real
// Pods and Services of the apiserver. Nothing here is dialled: a refused
// address is refused in the dial's Control hook, before it connects, and
// the suite's dial hook would refuse (and count) any address off this
// machine that the policy let through.
var _ = Describe("Upstreams inside the cluster", func() {

	It("refuses another namespace's Pod and Service, naming the address and the flag, and allows the McpServer's own", func(ctx SpecContext) {
		mine, theirs := podNamespace(), podNamespace()
		theirSvc := clusterIPService(theirs, "web")
		theirPod := podWithIP(theirs, "api", "10.244.3.7")
		mySvc := clusterIPService(mine, "web")
		myPod := podWithIP(mine, "api", "10.244.3.8")

		refused := func(name, url, addr string) {
			obj := httpServer(mine, name, url)
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			Eventually(func(g Gomega) {
				got := get(mine, name)
				g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
				g.Expect(got.Status.FailedAttempts).To(BeNumerically(">=", 1))
				g.Expect(got.Status.LastError).To(Equal(&v1alpha1.LastError{Stage: "transport-start",
					Message: "Refused to connect to " + addr + ": it is the address of a Pod or Service in another namespace " +
						"than the McpServer's; an administrator can allow it with --upstream-allow-cidrs"}))
			}, eventuallyTimeout, poll).Should(Succeed())
		}
		refused("service", "http://"+theirSvc+"/mcp", theirSvc+":80")
		refused("pod", "http://"+theirPod+":8080/mcp", theirPod+":8080")

		// The verdicts the supervisors get, on the same objects: the
		// McpServer's own namespace may reach its Pod and Service, the
		// other namespace its own.
		p := egress.Default().WithCluster(egress.DefaultClusterCIDRs, egress.KubeOwners{Reader: env.Client})
		check := func(ns, ip string) error { return p.Check(ctx, ns, netip.MustParseAddr(ip)) }
		Expect(check(mine, mySvc)).To(Succeed())
		Expect(check(mine, myPod)).To(Succeed())
		Expect(check(theirs, theirSvc)).To(Succeed())
		Expect(check(mine, theirSvc)).To(MatchError(ContainSubstring("another namespace")))
		Expect(check(theirs, myPod)).To(MatchError(ContainSubstring("another namespace")))
		Expect(check(mine, "10.244.3.9")).To(Succeed(), "an address nobody has is not another namespace's")

		// A Pod that has ended no longer holds its address. (Another Pod
		// than the one an McpServer above keeps retrying: the address it
		// frees would be dialled.)
		ended := podWithIP(theirs, "job", "10.244.3.10")
		Expect(check(mine, ended)).To(MatchError(ContainSubstring("another namespace")))
		setPodPhase(theirs, "job", corev1.PodSucceeded)
		Expect(check(mine, ended)).To(Succeed())
		Expect(egressViolations.Load()).To(BeZero())
	})
})

// clusterIPService creates a ClusterIP Service and returns the address the
// apiserver allocated it.
func clusterIPService(ns, name string) string {
	GinkgoHelper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	Expect(k8s.Create(context.Background(), svc)).To(Succeed())
	Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	return svc.Spec.ClusterIP
}

// podWithIP creates a Pod and gives it ip in its status, as the kubelet
// would; envtest runs no kubelet.
func podWithIP(ns, name, ip string) string {
	GinkgoHelper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1"}}}}
	Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
	return ip
}

func setPodPhase(ns, name string, phase corev1.PodPhase) {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod)).To(Succeed())
	pod.Status.Phase = phase
	Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
}

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
