package manager_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// TestGatewayIssuesItsOwnCertificate runs the manager as config/default
// deploys it (its RBAC, its admission policies, its arguments: no
// --gateway-cert-dir), with a short certificate validity: it keeps its CA in
// a Secret of its namespace and publishes the CA in the agent's namespace,
// an agent that trusts only that ConfigMap's CA calls a tool over TLS, and
// the renewed certificate is served without a restart. See docs/design.md,
// "The gateway" (TLS).
func TestGatewayIssuesItsOwnCertificate(t *testing.T) {
	g := NewWithT(t)
	metrics, probes, gw := freeAddr(t), freeAddr(t), freeAddr(t)
	_, managerNS, args := deployedManager(t, metrics, probes, gw)
	tenant := newNamespace(t, "tls-tenant-")
	createHTTPServer(t, tenant, "fx", serveFixture(t, fixture.Options{}))
	token := useToken(t, tenant, "agent")
	startManager(t, probes, append(args, "--upstream-allow-cidrs=127.0.0.0/8",
		"--gateway-cert-validity=30s", "--gateway-cert-renew-before=25s")...)
	waitForPhase(t, tenant, "fx", v1alpha1.PhaseReady)

	var caSecret corev1.Secret
	g.Eventually(func() error {
		return env.Client.Get(ctx(t), client.ObjectKey{Namespace: managerNS, Name: "mcpbridge-gateway-ca"}, &caSecret)
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the CA Secret in the manager's namespace")
	g.Expect(caSecret.Type).To(Equal(corev1.SecretTypeOpaque))

	published := func(g Gomega) *x509.CertPool {
		var cm corev1.ConfigMap
		g.Expect(env.Client.Get(ctx(t), client.ObjectKey{Namespace: tenant, Name: "mcpbridge-gateway-ca"}, &cm)).To(Succeed())
		g.Expect(cm.Data["ca.crt"]).To(Equal(string(caSecret.Data["tls.crt"])), "the ConfigMap publishes the Secret's CA")
		pool := x509.NewCertPool()
		g.Expect(pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"]))).To(BeTrue())
		return pool
	}
	var pool *x509.CertPool
	g.Eventually(func(g Gomega) { pool = published(g) }, time.Minute, 100*time.Millisecond).Should(Succeed())

	// An agent that trusts that CA alone calls a tool.
	hc := &http.Client{Transport: bearer{token: token, next: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil)
	var cs *mcp.ClientSession
	g.Eventually(func() (err error) { // the gateway binds once the manager leads
		cs, err = agent.Connect(ctx(t), &mcp.StreamableClientTransport{
			Endpoint: "https://" + gw + "/namespaces/" + tenant + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		return err
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	defer cs.Close()
	res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "over TLS"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), "%v", res.Content)

	// The certificate names the gateway's Service in the manager's
	// namespace, and only the published CA vouches for it.
	svcName := "mcpbridge-gateway." + managerNS + ".svc"
	conn, err := tls.Dial("tcp", gw, &tls.Config{RootCAs: pool, ServerName: svcName})
	g.Expect(err).NotTo(HaveOccurred(), "the certificate is valid for %s", svcName)
	first := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	_, err = tls.Dial("tcp", gw, &tls.Config{RootCAs: x509.NewCertPool(), ServerName: svcName})
	g.Expect(err).To(MatchError(ContainSubstring("unknown authority")))

	// Renewed RenewBefore its expiry, by the same process: a new serial,
	// from the same published CA.
	g.Eventually(servedSerial(gw, pool), time.Minute, 200*time.Millisecond).ShouldNot(Equal(first.SerialNumber.String()),
		"the renewed certificate is not served")
	res, err = cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "still"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), "%v", res.Content)

	// A deleted ConfigMap is put back.
	g.Expect(env.Client.Delete(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "mcpbridge-gateway-ca"}})).To(Succeed())
	g.Eventually(func(g Gomega) { published(g) }, time.Minute, 100*time.Millisecond).Should(Succeed(), "the ConfigMap is published again")
}

// useToken returns a token made for the gateway's audience of
// ServiceAccount name in ns, which may use the namespace's McpServers.
func useToken(t *testing.T, ns, name string) string {
	t.Helper()
	g := NewWithT(t)
	meta := metav1.ObjectMeta{Namespace: ns, Name: name}
	g.Expect(env.Client.Create(ctx(t), &corev1.ServiceAccount{ObjectMeta: meta})).To(Succeed())
	g.Expect(env.Client.Create(ctx(t), &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"}, Verbs: []string{"use"}}}})).To(Succeed())
	g.Expect(env.Client.Create(ctx(t), &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}}})).To(Succeed())
	out, _, err := env.Kubectl(ctx(t), "-n", ns, "create", "token", name, "--audience=mcpbridge.dev", "--duration=1h")
	g.Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(out)
}

// bearer sends a bearer token.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", fmt.Sprintf("Bearer %s", b.token))
	return b.next.RoundTrip(r)
}
