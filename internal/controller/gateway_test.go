package controller_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

var _ = Describe("Gateway", func() {
	BeforeEach(ensureGatewayUserRole)

	It("lets a bound ServiceAccount list and call tools, and refuses everyone else", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		readyAt(ns, "fx", 1)

		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		names := listToolNames(agent)
		Expect(names).To(ContainElement("mcp__fx__echo"))
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "hello"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse())
		Expect(textOf(res)).To(Equal("hello"))

		Expect(rawPost(ns, "")).To(Equal(http.StatusUnauthorized))
		Expect(rawPost(ns, "not-a-token")).To(Equal(http.StatusUnauthorized))
		Expect(rawPost(ns, saToken(ns, "stranger"))).To(Equal(http.StatusForbidden))
	})

	It("keeps namespaces apart", func(ctx SpecContext) {
		a, b := newNamespace(), newNamespace()
		Expect(k8s.Create(ctx, stdioServer(a, "only-a"))).To(Succeed())
		Expect(k8s.Create(ctx, stdioServer(b, "only-b"))).To(Succeed())
		readyAt(a, "only-a", 1)
		readyAt(b, "only-b", 1)

		tokenA := saToken(a, "agent", a)
		Expect(rawPost(b, tokenA)).To(Equal(http.StatusForbidden), "a token bound in A cannot reach B")
		namesB := listToolNames(connectAgent(b, saToken(b, "agent", b), nil))
		Expect(namesB).To(ContainElement("mcp__only-b__echo"))
		for _, n := range namesB {
			Expect(n).NotTo(HavePrefix("mcp__only-a__"))
		}
		Expect(rawPost(a, tokenA)).To(Equal(http.StatusOK))
	})

	DescribeTable("sends tools/list_changed when a server is created, re-synced and deleted", func(ctx SpecContext, protocol string) {
		ns := newNamespace()
		var changes atomic.Int32
		agent := connectAgent(ns, saToken(ns, "agent", ns), &changes, protocol)
		Expect(agent.InitializeResult().ProtocolVersion).To(Equal(protocol))
		Expect(listToolNames(agent)).To(BeEmpty(), "an empty namespace is a valid, empty list")

		Expect(k8s.Create(ctx, stdioServer(ns, "fx", "--list-changed-after=1500ms"))).To(Succeed())
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">=", 1))
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).Should(ContainElement("mcp__fx__echo"))

		afterCreate := changes.Load()
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).Should(ContainElement("mcp__fx__late_tool"))
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">", afterCreate))

		afterResync := changes.Load()
		Expect(k8s.Delete(ctx, get(ns, "fx"))).To(Succeed())
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">", afterResync))
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).Should(BeEmpty())
	},
		Entry("to a sessionless 2026-07-28 client", "2026-07-28"),
		Entry("to a 2025-11-25 client with a session", "2025-11-25"),
	)

	DescribeTable("fails a call whose upstream crashes within its deadline and cancels upstream when the caller gives up", func(ctx SpecContext, protocol string) {
		ns := newNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, stdioServer(ns, "fx", "--events-file="+events))).To(Succeed())
		readyAt(ns, "fx", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil, protocol)

		start := time.Now()
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fx__crash"})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeTrue())
		// The crash ends the call, not the call's deadline (the default).
		Expect(time.Since(start)).To(BeNumerically("<", policy.DefaultToolCallTimeoutMs*time.Millisecond))
		readyAt(ns, "fx", 2)

		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = agent.CallTool(cctx, &mcp.CallToolParams{Name: "mcp__fx__sleep", Arguments: map[string]any{"ms": 20000}})
		Expect(err).To(HaveOccurred())
		Eventually(func(g Gomega) {
			evs, err := fixture.ReadEvents(events)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(evs).To(ContainElement(SatisfyAll(
				HaveField("Kind", fixture.EventCancelled), HaveField("Tool", "sleep"))), "the fixture saw the cancellation")
		}, eventuallyTimeout, poll).Should(Succeed())
	},
		Entry("on 2026-07-28", "2026-07-28"),
		Entry("on 2025-11-25", "2025-11-25"),
	)

	It("passes server-everything's input schemas through intact", func(ctx SpecContext) {
		ns := newNamespace()
		entry := everythingEntry()
		obj := stdioServer(ns, "everything")
		obj.Spec.Stdio.Command, obj.Spec.Stdio.Args = "node", []string{entry, "stdio"}
		obj.Spec.ConnectionTimeoutMs = ptr32(30000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		readyAt(ns, "everything", 1)
		viaGateway := map[string]any{}
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		for t, err := range agent.Tools(ctx, nil) {
			Expect(err).NotTo(HaveOccurred())
			viaGateway[strings.TrimPrefix(t.Name, "mcp__everything__")] = t.InputSchema
		}

		direct := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "test"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		sess, err := direct.Connect(ctx, &mcp.CommandTransport{Command: exec.Command("node", entry, "stdio")}, nil)
		Expect(err).NotTo(HaveOccurred())
		defer sess.Close()
		count := 0
		for t, err := range sess.Tools(ctx, nil) {
			Expect(err).NotTo(HaveOccurred())
			Expect(viaGateway).To(HaveKey(t.Name))
			Expect(viaGateway[t.Name]).To(Equal(t.InputSchema), "schema of %s", t.Name)
			count++
		}
		Expect(viaGateway).To(HaveLen(count))
	})

	It("never forwards the agent's token upstream; the upstream gets only its configured headers", func(ctx SpecContext) {
		ns := newNamespace()
		fx, err := fixture.NewHTTPHandler(fixture.Options{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fx.Close)
		var seen []string
		var mu sync.Mutex
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Header.Get("Authorization"))
			mu.Unlock()
			fx.ServeHTTP(w, r)
		}))
		DeferCleanup(upstream.Close)
		obj := stdioServer(ns, "web")
		obj.Spec.Transport, obj.Spec.Stdio = v1alpha1.TransportStreamableHTTP, nil
		obj.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: upstream.URL + "/mcp",
			Headers: []v1alpha1.HTTPHeader{{Name: "Authorization", Value: ptr.To("Bearer upstream-credential")}}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		// Runs before upstream.Close, which waits for the supervisor's SSE stream.
		DeferCleanup(func(ctx SpecContext) {
			Expect(k8s.Delete(ctx, obj)).To(Succeed())
			Eventually(func() bool { return sups.Get(client.ObjectKeyFromObject(obj)) == nil }, eventuallyTimeout, poll).Should(BeTrue())
		})
		readyAt(ns, "web", 1)

		token := saToken(ns, "agent", ns)
		res, err := connectAgent(ns, token, nil).CallTool(ctx, &mcp.CallToolParams{Name: "mcp__web__echo", Arguments: map[string]any{"text": "x"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse())
		mu.Lock()
		defer mu.Unlock()
		Expect(seen).NotTo(BeEmpty())
		for _, h := range seen {
			Expect(h).To(Equal("Bearer upstream-credential"))
			Expect(h).NotTo(ContainSubstring(token))
		}
	})

	It("paginates 2,500 tools", func(ctx SpecContext) {
		ns := newNamespace()
		obj := stdioServer(ns, "many", "--tools=2500", "--page-size=700")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		ready := readyAt(ns, "many", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		var pages int
		cursor := ""
		var names []string
		for {
			res, err := agent.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
			Expect(err).NotTo(HaveOccurred())
			pages++
			for _, t := range res.Tools {
				names = append(names, t.Name)
			}
			if cursor = res.NextCursor; cursor == "" {
				break
			}
		}
		Expect(names).To(HaveLen(int(ready.Status.ToolCount)))
		Expect(pages).To(BeNumerically(">", 1))
	})
})

// ensureGatewayUserRole installs the ClusterRole of config/rbac that grants "use".
func ensureGatewayUserRole() {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "mcpbridge-gateway-user"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"}, Verbs: []string{"use"}}},
	}
	err := k8s.Create(context.Background(), role)
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		Expect(err).NotTo(HaveOccurred())
	}
}

// gatewayAudience is the audience of agents' tokens (--gateway-token-audiences).
const gatewayAudience = "mcpbridge.dev"

// saToken creates a ServiceAccount in ns, binds it to the gateway-user role
// in each of bindIn, and returns a token for the gateway's audience from the
// TokenRequest API, as `kubectl create token --audience mcpbridge.dev` does.
func saToken(ns, name string, bindIn ...string) string {
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Expect(k8s.Create(ctx, sa)).To(Succeed())
	for _, bns := range bindIn {
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: bns, Name: name + "-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "mcpbridge-gateway-user"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
		})).To(Succeed())
		waitMayUse(bns, ns, name, "")
	}
	return tokenFor(ns, name, gatewayAudience)
}

// waitMayUse waits until the apiserver's authorizer, which learns of
// bindings from its informers, lets ServiceAccount saNS/sa use the
// McpServer server in ns (any, when server is ""): the gateway asks the same
// authorizer, and a refusal it cached would outlive the lag.
func waitMayUse(ns, saNS, sa, server string) {
	GinkgoHelper()
	attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "use", Group: "mcpbridge.dev", Resource: "mcpservers", Name: server}
	user := "system:serviceaccount:" + saNS + ":" + sa
	Eventually(func(g Gomega) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}
		g.Expect(k8s.Create(context.Background(), sar)).To(Succeed())
		g.Expect(sar.Status.Allowed).To(BeTrue(), "%s may use %q in %s", user, server, ns)
	}, eventuallyTimeout, poll).Should(Succeed())
}

// tokenFor returns a token of ServiceAccount ns/name for audiences; none
// means the apiserver's own, as plain `kubectl create token` makes.
func tokenFor(ns, name string, audiences ...string) string {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600), Audiences: audiences}}
	Expect(k8s.SubResource("token").Create(context.Background(), sa, tr)).To(Succeed())
	Expect(tr.Status.Token).NotTo(BeEmpty())
	return tr.Status.Token
}

// connectAgent connects a go-sdk client to ns's gateway endpoint; changes,
// when given, counts tools/list_changed notifications.
func connectAgent(ns, token string, changes *atomic.Int32, protocol ...string) *mcp.ClientSession {
	var sessOpts *mcp.ClientSessionOptions
	if len(protocol) > 0 {
		sessOpts = &mcp.ClientSessionOptions{ProtocolVersion: protocol[0]}
	}
	opts := &mcp.ClientOptions{}
	if changes != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changes.Add(1) }
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "test"}, opts)
	var sess *mcp.ClientSession
	Eventually(func() error {
		var err error
		sess, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint:   gatewayURL + "/namespaces/" + ns + "/mcp",
			HTTPClient: &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, http.DefaultTransport)},
		}, sessOpts)
		return err
	}, eventuallyTimeout, poll).Should(Succeed())
	DeferCleanup(sess.Close)
	return sess
}

func listToolNames(sess *mcp.ClientSession) []string {
	var names []string
	for t, err := range sess.Tools(context.Background(), nil) {
		Expect(err).NotTo(HaveOccurred())
		names = append(names, t.Name)
	}
	return names
}

// rawPost sends an initialize request with token (none if empty) and
// returns the HTTP status.
func rawPost(ns, token string) int {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		Expect(resp.Header.Get("WWW-Authenticate")).To(HavePrefix("Bearer"))
	}
	return resp.StatusCode
}

// everythingEntry is server-everything's entry point from test/node
// (installed by make fixtures).
func everythingEntry() string {
	root, err := testenv.ModuleRoot()
	Expect(err).NotTo(HaveOccurred())
	entry := filepath.Join(root, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	_, err = os.Stat(entry)
	Expect(err).NotTo(HaveOccurred(), "run `make fixtures` to install the npm test servers")
	return entry
}
