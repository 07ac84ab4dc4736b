package manager_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/test/fixture"
)

// otlpCollector is an OTLP/HTTP receiver that keeps every span it gets,
// with its resource's service.name.
type otlpCollector struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
	raw     []string // every request as JSON, to look for what must not be there
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				c.service = append(c.service, kv.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.raw = append(c.raw, protojson.Format(req))
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *otlpCollector) received() (spans []*tracepb.Span, services []string, raw string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), append([]string(nil), c.service...), strings.Join(c.raw, "\n")
}

// traceHeaderUpstream is the fixture behind a handler that keeps the
// traceparent header of every request.
type traceHeaderUpstream struct {
	next    http.Handler
	mu      sync.Mutex
	headers []string
}

func (u *traceHeaderUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tp := r.Header.Get("Traceparent"); tp != "" {
		u.mu.Lock()
		u.headers = append(u.headers, tp)
		u.mu.Unlock()
	}
	u.next.ServeHTTP(w, r)
}

func (u *traceHeaderUpstream) traceparents() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.headers...)
}

// TestTracesReachACollectorAndAreFlushedAtShutdown runs the manager binary
// with OTEL_EXPORTER_OTLP_ENDPOINT naming a collector and a batch delay
// longer than the test, so that every span arrives only through the flush
// at SIGTERM. An agent with a gateway token and its own traceparent calls
// a tool of an HTTP McpServer: the collector gets the agent's trace
// through the gateway and the supervisor, the upstream sees that trace in
// its traceparent header, and the token appears nowhere in what was
// exported. See docs/design.md, "Tracing".
func TestTracesReachACollectorAndAreFlushedAtShutdown(t *testing.T) {
	g := NewWithT(t)
	col := &otlpCollector{}
	colSrv := httptest.NewServer(col)
	t.Cleanup(colSrv.Close)
	fx, err := fixture.NewHTTPHandler(fixture.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = fx.Close() })
	up := &traceHeaderUpstream{next: fx}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() {
		upSrv.CloseClientConnections()
		upSrv.Close()
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tracing-"}}
	g.Expect(env.Client.Create(ctx(t), ns)).To(Succeed())
	obj := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "fx"},
		Spec: v1alpha1.McpServerSpec{
			Transport:      v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: upSrv.URL + "/mcp"},
		},
	}
	g.Expect(env.Client.Create(ctx(t), obj)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
	_, _, err = env.Kubectl(ctx(t), "-n", ns.Name, "create", "serviceaccount", "agent")
	g.Expect(err).NotTo(HaveOccurred())
	// kubectl create role knows only the built-in verbs.
	meta := metav1.ObjectMeta{Namespace: ns.Name, Name: "agent"}
	g.Expect(env.Client.Create(ctx(t), &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"}, Verbs: []string{"use"}}}})).To(Succeed())
	g.Expect(env.Client.Create(ctx(t), &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns.Name, Name: "agent"}}})).To(Succeed())
	out, _, err := env.Kubectl(ctx(t), "-n", ns.Name, "create", "token", "agent", "--audience=mcpbridge.dev", "--duration=1h")
	g.Expect(err).NotTo(HaveOccurred())
	token := strings.TrimSpace(out)

	const agentTrace, agentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	t.Run("the manager traces a call", func(t *testing.T) {
		g := NewWithT(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", colSrv.URL)
		t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // only the flush at shutdown exports
		gateway, probes := freeAddr(t), freeAddr(t)
		startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-bind-address=0",
			"--gateway-bind-address="+gateway, "--gateway-tls=false", "--health-probe-bind-address="+probes, "--upstream-allow-cidrs=127.0.0.0/8")
		g.Eventually(func() v1alpha1.Phase {
			got := &v1alpha1.McpServer{}
			g.Expect(env.Client.Get(ctx(t), client.ObjectKeyFromObject(obj), got)).To(Succeed())
			return got.Status.Phase
		}, time.Minute, 100*time.Millisecond).Should(Equal(v1alpha1.PhaseReady))

		hc := &http.Client{Transport: agentTransport{token: token, traceparent: "00-" + agentTrace + "-" + agentSpan + "-01"}}
		agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil)
		var cs *mcp.ClientSession
		g.Eventually(func() error { // the gateway binds once the manager leads
			cs, err = agent.Connect(ctx(t), &mcp.StreamableClientTransport{
				Endpoint: "http://" + gateway + "/namespaces/" + ns.Name + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
			return err
		}, time.Minute, 200*time.Millisecond).Should(Succeed())
		defer cs.Close()
		g.Eventually(func() error {
			res, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "traced"}})
			if err == nil && res.IsError {
				err = fmt.Errorf("tool error: %v", res.Content)
			}
			return err
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		spans, _, _ := col.received()
		g.Expect(spans).To(BeEmpty(), "the batch delay holds every span until the flush")
	}) // the subtest's cleanup stops the manager with SIGTERM

	spans, services, raw := col.received()
	g.Expect(services).NotTo(BeEmpty())
	g.Expect(services).To(HaveEach("mcp-bridge"))
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	g.Expect(byName).To(HaveKey("mcpbridge.connect"))
	g.Expect(byName).To(HaveKey("mcpbridge.tools.sync"))
	inAgentTrace := func(name string) *tracepb.Span {
		for _, s := range byName[name] {
			if fmt.Sprintf("%x", s.TraceId) == agentTrace {
				return s
			}
		}
		return nil
	}
	request := inAgentTrace("POST /namespaces/{namespace}/mcp") // the initialize
	g.Expect(request).NotTo(BeNil(), "the gateway continued the agent's trace; spans: %v", keys(byName))
	// The fast path's tools/call is the request's SERVER span, and the
	// supervisor's call the span of the upstream's request.
	call := inAgentTrace("tools/call mcp__fx__echo")
	g.Expect(call).NotTo(BeNil())
	g.Expect(call.Kind).To(Equal(tracepb.Span_SPAN_KIND_SERVER))
	g.Expect(fmt.Sprintf("%x", call.ParentSpanId)).To(Equal(agentSpan))
	sup := inAgentTrace("tools/call echo")
	g.Expect(sup).NotTo(BeNil())
	g.Expect(sup.ParentSpanId).To(Equal(call.SpanId), "the supervisor's call is the gateway call's child")
	g.Expect(up.traceparents()).To(ContainElement(fmt.Sprintf("00-%s-%x-01", agentTrace, sup.SpanId)),
		"the upstream saw the agent's trace, in the supervisor's call")
	g.Expect(raw).NotTo(ContainSubstring(token))
	g.Expect(raw).NotTo(ContainSubstring(token[len(token)-20:]))
}

// agentTransport sends an agent's bearer token and traceparent.
type agentTransport struct{ token, traceparent string }

func (a agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	r.Header.Set("Traceparent", a.traceparent)
	return http.DefaultTransport.RoundTrip(r)
}

func keys(m map[string][]*tracepb.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
