package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

const (
	fixturePort = 8080
	// gatewayPort is the manager's --gateway-bind-address in config/default.
	gatewayPort = 8090
	// tokenAudience is the manager's default --gateway-token-audiences
	// (docs/design.md, "Shared-cluster rules").
	tokenAudience = "mcpbridge.dev"
	// apiAudience is the apiserver's own audience (its issuer), which a
	// TokenReview without audiences checks.
	apiAudience = "https://kubernetes.default.svc.cluster.local"
)

// startFixturePod runs the fixture as a Streamable HTTP server Pod on the
// Pod network, hardened as Pod Security "restricted" asks, and returns its
// MCP endpoint once it is Ready.
func startFixturePod(ctx context.Context, ns string) string {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fixture", Namespace: ns, Labels: map[string]string{"app": "fixture"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "fixture",
				Image:           fixtureImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--http", fmt.Sprintf("0.0.0.0:%d", fixturePort), "--server-name", "fixture"},
				Ports:           []corev1.ContainerPort{{Name: "mcp", ContainerPort: fixturePort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(fixturePort)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	Expect(cluster.Client.Create(ctx, pod)).To(Succeed())
	Eventually(func(ctx context.Context) error {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if !podReady(pod) || pod.Status.PodIP == "" {
			return fmt.Errorf("fixture Pod not Ready: %+v", pod.Status)
		}
		return nil
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	Expect(strings.HasPrefix(pod.Status.PodIP, "10.244.")).To(BeTrue(), "the fixture runs on the Pod network, not the host's")
	return fmt.Sprintf("http://%s/mcp", net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(fixturePort)))
}

// readyFixtureServer creates namespace ns with the fixture's Pod and an
// McpServer for it, waits until that is Ready, and reports how long it took
// under entry.
func readyFixtureServer(ctx context.Context, ns, entry string) *v1alpha1.McpServer {
	Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	url := startFixturePod(ctx, ns)
	server := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Name: "fixture", Namespace: ns},
		Spec: v1alpha1.McpServerSpec{
			Transport:      v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: url},
		},
	}
	created := time.Now()
	Expect(cluster.Client.Create(ctx, server)).To(Succeed())
	Eventually(serverReady(server, 0)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	AddReportEntry(entry, time.Since(created).Round(time.Millisecond).String())
	return server
}

// agentToken returns a token for ServiceAccount name in ns, with config/rbac's
// gateway-user ClusterRole bound in ns (created on first use). The token is
// bound to the gateway's audience and to the apiserver's: a manager that
// reviews tokens for its audience accepts it, and so does one that sends
// TokenReviews without audiences.
func agentToken(ctx context.Context, ns, name string) string {
	return roleToken(ctx, ns, name, "mcpbridge-gateway-user", tokenAudience, apiAudience)
}

// roleToken returns a token made for audiences for ServiceAccount name in
// ns, with ClusterRole role bound in ns; the first call for name creates the
// ServiceAccount and the RoleBinding.
func roleToken(ctx context.Context, ns, name, role string, audiences ...string) string {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := cluster.Client.Create(ctx, sa); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
		Expect(cluster.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gateway-user", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})).To(Succeed())
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600),
	}}
	Expect(cluster.Client.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
	Expect(tr.Status.Token).NotTo(BeEmpty())
	return tr.Status.Token
}

func gatewayEndpoint(mgr *corev1.Pod, ns string) string {
	return fmt.Sprintf("https://%s/namespaces/%s/mcp", net.JoinHostPort(mgr.Status.PodIP, fmt.Sprint(gatewayPort)), ns)
}

// gatewayCAConfigMap is where the manager publishes its gateway's CA in
// each watched namespace.
const gatewayCAConfigMap = "mcpbridge-gateway-ca"

// gatewayClient is an agent's HTTP client for the gateway of manager Pod
// mgr, as an agent in ns is told to make it: it trusts only the CA the
// manager published in ns and checks the certificate for the gateway
// Service's name (config/default's or a Helm release's), while it dials the
// Pod's IP; with a token, it sends it.
func gatewayClient(ctx context.Context, mgr *corev1.Pod, ns, token string) *http.Client {
	GinkgoHelper()
	pool := x509.NewCertPool()
	Eventually(func(g Gomega, ctx context.Context) {
		var cm corev1.ConfigMap
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayCAConfigMap}, &cm)).To(Succeed())
		g.Expect(pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"]))).To(BeTrue(), "ca.crt of ConfigMap %s/%s", ns, gatewayCAConfigMap)
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed(), "the manager publishes its gateway CA in %s", ns)
	service := "mcpbridge-gateway"
	if release := mgr.Labels["app.kubernetes.io/instance"]; release != "" { // a Helm release's
		service = release + "-gateway"
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: service + "." + mgr.Namespace + ".svc"}}
	if token != "" {
		rt = transport.NewBearerAuthRoundTripper(token, rt)
	}
	return &http.Client{Transport: rt}
}

// expectGatewayServes lists the namespace's tools at the manager Pod's
// gateway as an agent with token and calls the fixture's echo tool.
func expectGatewayServes(ctx context.Context, mgr *corev1.Pod, ns, token string) {
	hc := gatewayClient(ctx, mgr, ns, token)
	agent := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "test"}, nil)
	var sess *mcp.ClientSession
	// The gateway starts with leadership, a moment after the Pod is Ready.
	Eventually(func(ctx context.Context) (err error) {
		sess, err = agent.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   gatewayEndpoint(mgr, ns),
			HTTPClient: hc,
		}, nil)
		return err
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	defer sess.Close()

	var names []string
	for tool, err := range sess.Tools(ctx, nil) {
		Expect(err).NotTo(HaveOccurred())
		names = append(names, tool.Name)
	}
	Expect(names).To(ContainElement("mcp__fixture__echo"))

	res, err := sess.CallTool(ctx, &mcp.CallToolParams{
		Name: "mcp__fixture__echo", Arguments: map[string]any{"text": "hello from the node"},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(res.IsError).To(BeFalse())
	Expect(res.Content).To(ConsistOf(WithTransform(func(c mcp.Content) string {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
		return fmt.Sprintf("%T", c)
	}, Equal("hello from the node"))))
}

// expectGatewayRefusesAnonymous connects without a token: the gateway
// answers 401, which the SDK reports as Unauthorized.
func expectGatewayRefusesAnonymous(ctx context.Context, mgr *corev1.Pod, ns string) {
	expectGatewayRefuses(ctx, mgr, ns, "")
}

// expectGatewayRefuses connects with token (none if empty): the gateway
// answers 401.
func expectGatewayRefuses(ctx context.Context, mgr *corev1.Pod, ns, token string) {
	agent := mcp.NewClient(&mcp.Implementation{Name: "refused", Version: "test"}, nil)
	_, err := agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gatewayEndpoint(mgr, ns),
		HTTPClient: gatewayClient(ctx, mgr, ns, token), MaxRetries: -1}, nil)
	Expect(err).To(MatchError(ContainSubstring("Unauthorized")))
}
