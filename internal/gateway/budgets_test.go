package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// The budgets (budgets.go) against a real gateway on loopback, real go-sdk
// agents and hand-made requests; the upstream is the fake caller, which
// blocks calls on a gate so that the test decides what is in flight.

func refusalCount(t *testing.T, ns, limit string) float64 {
	t.Helper()
	v, _ := metricSample(t, "mcpbridge_gateway_refusals_total", map[string]string{"namespace": ns, "limit": limit})
	return v
}

// TestSessionsBeyondTheBudgetAreRefusedWith429: an identity's third session
// is refused at once with Retry-After and the flag's name; sessionless
// calls go on, and a session that ends makes room.
func TestSessionsBeyondTheBudgetAreRefusedWith429(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{budgets: Budgets{SessionsPerIdentity: 2}})
	first := e.agent(statefulProto)
	e.agent(statefulProto)
	expectInitializeRefused(t, g, e, limitSessions, FlagMaxSessionsPerIdentity)

	// Calls without a session are not sessions.
	call, hdr := sessionlessCall(7, echoPublic, `{}`)
	code, h, body := e.mustPost(call, hdr)
	g.Expect(code).To(Equal(http.StatusOK))
	_, res := fastAnswer(t, h, body)
	g.Expect(textOf(&res)).To(Equal("fast"))

	expectRoomOnceClosed(g, e, first)
}

// expectInitializeRefused: the next initialize is refused at once with 429,
// Retry-After and flag's name, and counted under limit.
func expectInitializeRefused(t *testing.T, g Gomega, e *testEnv, limit, flag string) {
	t.Helper()
	before := refusalCount(t, testNS, limit)
	code, h, body := e.mustPost(initializeBody, map[string]string{"Mcp-Protocol-Version": ""})
	g.Expect(code).To(Equal(http.StatusTooManyRequests), "body %s", body)
	g.Expect(h.Get("Retry-After")).NotTo(BeEmpty())
	g.Expect(string(body)).To(ContainSubstring(flag))
	g.Expect(refusalCount(t, testNS, limit)).To(Equal(before + 1))
}

// expectRoomOnceClosed: once session ends (DELETE), an initialize succeeds.
func expectRoomOnceClosed(g Gomega, e *testEnv, session *mcp.ClientSession) {
	g.Expect(session.Close()).To(Succeed())
	g.Eventually(func() int {
		code, _, _ := e.mustPost(initializeBody, map[string]string{"Mcp-Protocol-Version": ""})
		return code
	}, waitLimit).Should(Equal(http.StatusOK))
}

// The namespace's session budget counts every identity's sessions: the
// third session of a namespace is refused though its identity holds far
// fewer than its own budget, and a session that ends makes room.
func TestSessionsBeyondTheNamespaceBudgetAreRefusedWith429(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{budgets: Budgets{SessionsPerIdentity: 100, SessionsPerNamespace: 2}})
	first := e.agent(statefulProto)
	e.agent(statefulProto)
	expectInitializeRefused(t, g, e, limitSessionsNS, FlagMaxSessionsPerNamespace)
	expectRoomOnceClosed(g, e, first)
}

// Another identity's sessions, and the initialize requests it is serving,
// count against the namespace's budget; its own budget is not what refuses.
func TestTheNamespaceSessionBudgetCountsEveryIdentity(t *testing.T) {
	g := NewWithT(t)
	e := newEndpoint(testNS, &Gateway{Registry: registry.New(), Budgets: Budgets{SessionsPerIdentity: 2, SessionsPerNamespace: 3}})
	alice, _ := e.hold(&kubeauth.User{Name: "alice", Identity: "alice"})
	bob, _ := e.hold(&kubeauth.User{Name: "bob", Identity: "bob"})
	admit := func(v *view) (func(), *httptest.ResponseRecorder) {
		w := httptest.NewRecorder()
		release, _ := v.admitSession(w, httptest.NewRequest(http.MethodPost, "/", nil))
		return release, w
	}
	var opening []func()
	for _, v := range []*view{alice, alice, bob} {
		release, w := admit(v)
		g.Expect(release).NotTo(BeNil(), "refused: %s", w.Body)
		opening = append(opening, release)
	}
	release, w := admit(bob)
	g.Expect(release).To(BeNil())
	g.Expect(w.Code).To(Equal(http.StatusTooManyRequests))
	g.Expect(w.Body.String()).To(ContainSubstring(FlagMaxSessionsPerNamespace))
	opening[0]()
	release, w = admit(bob)
	g.Expect(release).NotTo(BeNil(), "refused after a place was given back: %s", w.Body)
}

// gate holds the fake's calls until opened and says how many arrived.
type gate struct {
	mu      sync.Mutex
	entered int
	open    chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (gt *gate) enter(ctx context.Context) error {
	gt.mu.Lock()
	gt.entered++
	gt.mu.Unlock()
	select {
	case <-gt.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (gt *gate) count() int {
	gt.mu.Lock()
	defer gt.mu.Unlock()
	return gt.entered
}

// callInBackground posts a sessionless call of echo and reports its answer
// on the returned channel.
func (e *testEnv) callInBackground(id int) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		call, hdr := sessionlessCall(id, echoPublic, `{}`)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_, _, body, _ := e.post(ctx, call, hdr)
		out <- body
	}()
	return out
}

// rpcError decodes a JSON-RPC error answer.
func rpcError(t *testing.T, body []byte) (code int64, msg string) {
	t.Helper()
	var a struct {
		Error *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Error == nil {
		t.Fatalf("not a JSON-RPC error (%v): %s", err, body)
	}
	return a.Error.Code, a.Error.Message
}

// TestCallsBeyondTheBudgetAreRefusedAtOnce: with the budget of calls in
// flight spent, one more call, on the fast path or through the SDK, gets a
// JSON-RPC error naming the limit without reaching the upstream, while
// another namespace's calls go on; once a call ends there is room again.
func TestCallsBeyondTheBudgetAreRefusedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budgets Budgets
		flag    string
		limit   string
	}{
		{"per identity", Budgets{CallsPerIdentity: 2, CallsPerNamespace: 100}, FlagMaxCallsPerIdentity, limitCallsIdent},
		{"per namespace", Budgets{CallsPerIdentity: 100, CallsPerNamespace: 2}, FlagMaxCallsPerNamespace, limitCallsNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newTestEnv(t, envOptions{budgets: tc.budgets})
			gt := newGate()
			e.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
				if err := gt.enter(ctx); err != nil {
					return nil, false, err
				}
				return json.RawMessage(defaultResult), false, nil
			})
			other := &fakeCaller{}
			if _, err := e.g.Registry.Swap("other", "other/"+testServer, testServer,
				[]*mcp.Tool{{Name: echoTool, InputSchema: json.RawMessage(`{"type":"object"}`)}}, other); err != nil {
				t.Fatal(err)
			}
			held := []<-chan []byte{e.callInBackground(1), e.callInBackground(2)}
			g.Eventually(gt.count, waitLimit).Should(Equal(2))
			before := refusalCount(t, testNS, tc.limit)

			call, hdr := sessionlessCall(3, echoPublic, `{}`)
			code, _, body := e.mustPost(call, hdr)
			g.Expect(code).To(Equal(http.StatusOK))
			rc, msg := rpcError(t, body)
			g.Expect(rc).To(BeEquivalentTo(codeBudget))
			g.Expect(msg).To(ContainSubstring(tc.flag))
			g.Expect(gt.count()).To(Equal(2), "the refused call reached the upstream")

			// The SDK path (a tool with x-mcp-header parameters) is held to it too.
			agent := e.agent(sessionlessProto)
			_, err := agent.ListTools(context.Background(), nil) // so that it sends Mcp-Param-Region
			g.Expect(err).NotTo(HaveOccurred())
			_, err = agent.CallTool(context.Background(), &mcp.CallToolParams{Name: regionPublic,
				Arguments: map[string]any{"region": "eu"}})
			g.Expect(err).To(MatchError(ContainSubstring(tc.flag)))
			g.Expect(refusalCount(t, testNS, tc.limit)).To(Equal(before + 2))

			// Another namespace is not held to this one's budget.
			otherCall, otherHdr := sessionlessCall(4, echoPublic, `{}`)
			code, h, body := e.post2(e.srv.URL+"/namespaces/other/mcp", otherCall, otherHdr)
			g.Expect(code).To(Equal(http.StatusOK))
			_, res := fastAnswer(t, h, body)
			g.Expect(textOf(&res)).To(Equal("fast"))

			close(gt.open)
			for _, c := range held {
				_, res := fastAnswer(t, http.Header{"Content-Type": {"application/json"}}, <-c)
				g.Expect(textOf(&res)).To(Equal("fast"))
			}
			code, h, body = e.mustPost(call, hdr)
			g.Expect(code).To(Equal(http.StatusOK))
			_, res = fastAnswer(t, h, body)
			g.Expect(textOf(&res)).To(Equal("fast"))
		})
	}
}

// post2 is mustPost to another endpoint.
func (e *testEnv) post2(url, body string, header map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	saved := e.url
	e.url = url
	defer func() { e.url = saved }()
	return e.mustPost(body, header)
}

// TestResultBytesBeyondTheBudgetAreRefused: while one call holds most of
// the namespace's result bytes, another whose result would pass the budget
// gets a JSON-RPC error naming the limit; the first result arrives whole,
// and its bytes are given back once it is written.
func TestResultBytesBeyondTheBudgetAreRefused(t *testing.T) {
	g := NewWithT(t)
	const budget, size = 1 << 20, 600 << 10
	e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: budget}})
	gt := newGate()
	text := strings.Repeat("x", size-64)
	big, _ := json.Marshal(mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}})
	e.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		// As the bridge does: the result is taken before it is read.
		if !registry.ResultBytesFrom(ctx).Take(int64(len(big))) {
			return nil, false, &bridge.StageError{Stage: bridge.StageToolsCall, Err: registry.ErrResultBudget}
		}
		if err := gt.enter(ctx); err != nil {
			return nil, false, err
		}
		return big, false, nil
	})
	first := e.callInBackground(1)
	g.Eventually(gt.count, waitLimit).Should(Equal(1))
	before := refusalCount(t, testNS, limitResultBytes)

	call, hdr := sessionlessCall(2, echoPublic, `{}`)
	code, _, body := e.mustPost(call, hdr)
	g.Expect(code).To(Equal(http.StatusOK))
	rc, msg := rpcError(t, body)
	g.Expect(rc).To(BeEquivalentTo(codeBudget))
	g.Expect(msg).To(ContainSubstring(FlagMaxResultBytesPerNamespace))
	g.Expect(refusalCount(t, testNS, limitResultBytes)).To(Equal(before + 1))

	close(gt.open)
	_, res := fastAnswer(t, http.Header{"Content-Type": {"application/json"}}, <-first)
	g.Expect(textOf(&res)).To(Equal(text))
	g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero())
	code, h, body := e.mustPost(call, hdr)
	g.Expect(code).To(Equal(http.StatusOK))
	_, res = fastAnswer(t, h, body)
	g.Expect(textOf(&res)).To(Equal(text))
}

// TestArgumentsCountAgainstTheNamespaceBytes: the arguments of the calls in
// flight are held too (in the agent's request and upstream's), so a call
// whose arguments would pass the budget is refused before it is forwarded.
func TestArgumentsCountAgainstTheNamespaceBytes(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: 1 << 20}})
	gt := newGate()
	e.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		if err := gt.enter(ctx); err != nil {
			return nil, false, err
		}
		return json.RawMessage(defaultResult), false, nil
	})
	args := `{"text":"` + strings.Repeat("a", 300<<10) + `"}` // held twice: 600 KiB
	out := make(chan []byte, 1)
	go func() {
		call, hdr := sessionlessCall(1, echoPublic, args)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_, _, body, _ := e.post(ctx, call, hdr)
		out <- body
	}()
	g.Eventually(gt.count, waitLimit).Should(Equal(1))

	call, hdr := sessionlessCall(2, echoPublic, args)
	_, _, body := e.mustPost(call, hdr)
	rc, msg := rpcError(t, body)
	g.Expect(rc).To(BeEquivalentTo(codeBudget))
	g.Expect(msg).To(ContainSubstring(FlagMaxResultBytesPerNamespace))
	g.Expect(gt.count()).To(Equal(1), "the refused call reached the upstream")

	close(gt.open)
	_, res := fastAnswer(t, http.Header{"Content-Type": {"application/json"}}, <-out)
	g.Expect(textOf(&res)).To(Equal("fast"))
	g.Eventually(e.view().e.results.held.Load, waitLimit).Should(BeZero())
}

// TestSDKPathResultsCountAgainstTheNamespaceBytes: a call the SDK serves
// (here one with a fractional id, which the fast path leaves to it) to the
// real fixture is held to the namespace's result bytes as a fast call is: a
// result that would pass the budget is refused with the flag's name instead
// of being written, a small one passes, and its bytes are given back.
func TestSDKPathResultsCountAgainstTheNamespaceBytes(t *testing.T) {
	g := NewWithT(t)
	e := newUpstreamEnv(t, upstreamOptions{budgets: Budgets{ResultBytesPerNamespace: 1 << 20},
		fixture: fixture.Options{BigResult: 2 << 20}})
	callThroughSDK := func(tool, args string) (contentType, body string) {
		call, hdr := sessionlessCall(1, tool, args)
		call = strings.Replace(call, `"id":1,`, `"id":1.0,`, 1)
		req, err := http.NewRequest(http.MethodPost, e.url, strings.NewReader(call))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := e.hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%.300s", b)
		return resp.Header.Get("Content-Type"), string(b)
	}
	before := refusalCount(t, testNS, limitResultBytes)

	ct, body := callThroughSDK(registry.PublicName("fx", fixture.ToolBig), `{}`)
	g.Expect(ct).To(HavePrefix("text/event-stream"), "not the SDK's answer: %.300s", body)
	g.Expect(len(body)).To(BeNumerically("<", 1<<20), "the result was written")
	g.Expect(body).To(ContainSubstring(`"code":%d`, codeBudget))
	g.Expect(body).To(ContainSubstring(FlagMaxResultBytesPerNamespace))
	g.Expect(refusalCount(t, testNS, limitResultBytes)).To(Equal(before + 1))

	ct, body = callThroughSDK(fxEcho, `{"text":"small enough"}`)
	g.Expect(ct).To(HavePrefix("text/event-stream"))
	g.Expect(body).To(ContainSubstring("small enough"))
	v, release, err := e.g.view(context.Background(), testNS, grant{all: true})
	g.Expect(err).NotTo(HaveOccurred())
	release()
	g.Eventually(v.e.results.held.Load, waitLimit).Should(BeZero())
}

// A call another replica forwarded here, to its server's owner, counts
// into the namespace's budget of result bytes with this replica's own
// calls (Gateway.ResultBytes): refused beyond it and counted, given back
// when done, and the namespace's endpoint is not forgotten while it holds.
func TestAForwardedCallCountsIntoTheNamespacesResultBytes(t *testing.T) {
	g := NewWithT(t)
	const budget, size = 1 << 20, 600 << 10
	e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: budget}})
	e.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		if !registry.ResultBytesFrom(ctx).Take(size) { // as the bridge does
			return nil, false, &bridge.StageError{Stage: bridge.StageToolsCall, Err: registry.ErrResultBudget}
		}
		return json.RawMessage(`{"content":[]}`), false, nil
	})
	forwarded, done := e.g.ResultBytes(testNS)
	g.Expect(forwarded.Take(size)).To(BeTrue())

	before := refusalCount(t, testNS, limitResultBytes)
	another, doneAnother := e.g.ResultBytes(testNS)
	g.Expect(another.Take(size)).To(BeFalse(), "a second forwarded call past the budget")
	g.Expect(refusalCount(t, testNS, limitResultBytes)).To(Equal(before + 1))
	doneAnother()
	call, hdr := sessionlessCall(1, echoPublic, `{}`)
	_, _, body := e.mustPost(call, hdr)
	rc, _ := rpcError(t, body)
	g.Expect(rc).To(BeEquivalentTo(codeBudget), "this replica's own call past the budget")

	e.g.sweep(time.Now().Add(24*time.Hour), time.Minute)
	g.Expect(e.g.allEndpoints()).To(HaveLen(1), "the endpoint whose budget a forwarded call holds")
	done()
	_, _, body = e.mustPost(call, hdr)
	g.Expect(string(body)).NotTo(ContainSubstring(`"error"`), "once the forwarded call gave its bytes back")
}
