package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/registry"
)

// The tests of sessions on every replica (sealed.go, restore.go): two
// gateways, each with a registry of its own holding the same tools and a
// shared key ring, behind a switch that plays a Service: a real go-sdk
// agent opens its session on one, and its next connections land on the
// other.

// testRing is a SessionKeys the test rotates and retires by hand.
type testRing struct {
	mu      sync.Mutex
	current uint32
	keys    map[uint32]cipher.AEAD
}

func newTestRing(t *testing.T) *testRing {
	r := &testRing{keys: map[uint32]cipher.AEAD{}}
	r.rotate(t)
	return r
}

// rotate makes a new key current; the old one stays honoured.
func (r *testRing) rotate(t *testing.T) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current++
	r.keys[r.current] = aead
}

func (r *testRing) currentID() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

func (r *testRing) retire(id uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.keys, id)
}

func (r *testRing) Current() (uint32, cipher.AEAD, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[r.current]
	return r.current, k, ok
}

func (r *testRing) Key(id uint32) (cipher.AEAD, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[id]
	return k, ok
}

// replica is one gateway with its own registry and upstream.
type replica struct {
	name  string
	g     *Gateway
	reg   *registry.Registry
	fake  *fakeCaller
	h     http.Handler
	inits atomic.Int64 // initialize requests that reached it
}

// replicas is a pair behind one address; posts and gets say which replica
// the next POST and the next GET land on.
type replicas struct {
	a, b         *replica
	posts, gets  atomic.Pointer[replica]
	url, baseURL string
	hc           *http.Client
}

type replicaOptions struct {
	keys  SessionKeys
	auth  func() *Access // a new Access per replica; nil: no authentication
	token atomic.Pointer[string]
}

func newReplica(t *testing.T, name string, o *replicaOptions) *replica {
	t.Helper()
	fake := &fakeCaller{}
	reg := registry.New()
	tools := []*mcp.Tool{{Name: echoTool, InputSchema: json.RawMessage(`{"type":"object"}`)}}
	if _, err := reg.Swap(testNS, testNS+"/"+testServer, testServer, tools, fake); err != nil {
		t.Fatal(err)
	}
	g := &Gateway{Registry: reg, SessionKeys: o.keys, SessionIdleTimeout: testIdle}
	if o.auth != nil {
		g.Auth = o.auth()
	}
	rep := &replica{name: name, g: g, reg: reg, fake: fake, h: g.Handler()}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		defer close(started)
		_ = g.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-started
	})
	return rep
}

func newReplicas(t *testing.T, o *replicaOptions) *replicas {
	t.Helper()
	p := &replicas{a: newReplica(t, "a", o), b: newReplica(t, "b", o)}
	p.posts.Store(p.a)
	p.gets.Store(p.a)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to := p.posts.Load()
		if r.Method == http.MethodGet {
			to = p.gets.Load()
		}
		if body, err := io.ReadAll(r.Body); err == nil {
			if strings.Contains(string(body), `"method":"initialize"`) {
				to.inits.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		w.Header().Set("X-Replica", to.name)
		to.h.ServeHTTP(w, r)
	}))
	p.baseURL = srv.URL
	p.url = srv.URL + "/namespaces/" + testNS + "/mcp"
	p.hc = &http.Client{Transport: tokenTransport{token: &o.token, next: &http.Transport{}}}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		p.hc.CloseIdleConnections()
	})
	return p
}

// tokenTransport sends the bearer token set last, if any.
type tokenTransport struct {
	token *atomic.Pointer[string]
	next  *http.Transport
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tok := t.token.Load(); tok != nil {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+*tok)
	}
	return t.next.RoundTrip(r)
}

func (t tokenTransport) CloseIdleConnections() { t.next.CloseIdleConnections() }

// to sends every later request (and the connections it opens) to rep.
func (p *replicas) to(rep *replica) {
	p.posts.Store(rep)
	p.gets.Store(rep)
	p.hc.CloseIdleConnections()
}

// request sends a request of session sid to namespace ns's endpoint and
// returns the status, the replica that answered and the body.
func (p *replicas) request(t *testing.T, method, ns, sid, body string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.baseURL+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", statefulProto)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Replica"), string(b)
}

const listTools = `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`

// An agent that opened its session on A goes on with it on B: the same
// session id, no new initialize, its calls served by B's upstream (on the
// fast path), and B holds the session from then on.
func TestASessionOpenedOnOneReplicaGoesOnOnAnother(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	cs := connectAgent(t, p.url, p.hc, statefulProto)
	sid := cs.ID()
	if p.a.inits.Load() != 1 {
		t.Fatalf("A saw %d initialize requests, want 1", p.a.inits.Load())
	}
	p.to(p.b)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for i := range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic})
		if err != nil {
			t.Fatalf("call %d on B: %v", i, err)
		}
		if textOf(res) != "fast" {
			t.Fatalf("call %d on B answered %q", i, textOf(res))
		}
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list on B: %v", err)
	}
	if cs.ID() != sid {
		t.Fatalf("the session id changed from %q to %q", sid, cs.ID())
	}
	if n := p.b.inits.Load(); n != 0 {
		t.Fatalf("B saw %d initialize requests from the agent, want none", n)
	}
	if jsonCalls, sdkCalls := p.b.fake.counts(); jsonCalls != 3 || sdkCalls != 0 {
		t.Fatalf("B's upstream: %d fast and %d SDK calls, want 3 and 0", jsonCalls, sdkCalls)
	}
	if jsonCalls, _ := p.a.fake.counts(); jsonCalls != 0 {
		t.Fatalf("A's upstream got %d calls after the move", jsonCalls)
	}
	v, release, err := p.b.g.view(ctx, testNS, grant{all: true})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !v.hasSession(sid) {
		t.Fatal("B does not hold the session")
	}
	// The session B took up has the agent's own initialize params.
	va, release, err := p.a.g.view(ctx, testNS, grant{all: true})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if a, b := initializeParams(t, va, sid), initializeParams(t, v, sid); a != b {
		t.Fatalf("B's session was initialized with %s, A's with %s", b, a)
	}
}

// initializeParams are the params session sid of v was initialized with,
// as JSON.
func initializeParams(t *testing.T, v *view, sid string) string {
	t.Helper()
	for ss := range v.server.Sessions() {
		if ss.ID() == sid {
			b, err := json.Marshal(ss.InitializeParams())
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("no session %s", sid)
	return ""
}

// A GET stream the agent opens on B, where its session was not opened,
// receives notifications/tools/list_changed when B's registry changes.
func TestAGetStreamOnAnotherReplicaReceivesListChanged(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	sid := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", statefulProto)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Replica") != "b" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET on %s: status %d: %s", resp.Header.Get("X-Replica"), resp.StatusCode, b)
	}
	lines := bufio.NewScanner(resp.Body)
	// The SDK's first comment: the stream is registered once it is sent.
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), ":") {
		t.Fatalf("the stream began with %q", lines.Text())
	}
	more := []*mcp.Tool{{Name: "more", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	if _, err := p.b.reg.Swap(testNS, testNS+"/other", "other", more, &fakeCaller{}); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		if strings.Contains(lines.Text(), "notifications/tools/list_changed") {
			return
		}
	}
	t.Fatalf("the stream on B ended without list_changed: %v", lines.Err())
}

// What another replica must not take up answers 404: an id no ring sealed,
// a sealed id altered, one sealed for another namespace, and one sealed
// with a key the ring no longer honours; rotation alone keeps ids working.
func TestIdsThatDoNotOpenAreNotFound(t *testing.T) {
	ring := newTestRing(t)
	p := newReplicas(t, &replicaOptions{keys: ring})
	cs := connectAgent(t, p.url, p.hc, statefulProto)
	sid := cs.ID()
	p.to(p.b)
	raw, err := base64.RawURLEncoding.DecodeString(sid)
	if err != nil {
		t.Fatalf("the session id %q is not base64url: %v", sid, err)
	}
	raw[len(raw)-1] ^= 1
	altered := base64.RawURLEncoding.EncodeToString(raw)
	for _, tc := range []struct{ name, ns, sid string }{
		{"a random id", testNS, rand.Text()},
		{"an altered id", testNS, altered},
		{"an id of another namespace", "elsewhere", sid},
	} {
		if code, on, body := p.request(t, http.MethodPost, tc.ns, tc.sid, listTools); code != http.StatusNotFound || on != "b" {
			t.Errorf("%s: status %d on %s, want 404 on b: %s", tc.name, code, on, body)
		}
	}
	// Rotated: the session's key is no longer current but still honoured.
	old := ring.currentID()
	ring.rotate(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil {
		t.Fatalf("a call on B after a rotation: %v", err)
	}
	// Retired: a replica that does not hold the session (a third one;
	// A and B hold it live) refuses it.
	ring.retire(old)
	c := newReplica(t, "c", &replicaOptions{keys: ring})
	p.to(c)
	if code, on, body := p.request(t, http.MethodPost, testNS, sid, listTools); code != http.StatusNotFound || on != "c" {
		t.Fatalf("an id of a retired key: status %d on %s, want 404 on c: %s", code, on, body)
	}
	// Where it is live, the session goes on.
	p.to(p.b)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil {
		t.Fatalf("a call on B, which holds the session, after its key was retired: %v", err)
	}
}

// allowAll authenticates every agentToken as its sub and allows it the
// whole namespace.
type allowAll struct{ client.Client }

func (allowAll) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		o.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: o.Spec.Audiences,
			User: authnv1.UserInfo{Username: agentOf(o.Spec.Token)}}
	case *authzv1.SubjectAccessReview:
		o.Status.Allowed = true
	}
	return nil
}

// A session id is sealed for the identity that opened it: another identity
// presenting it on another replica gets 404, the same identity goes on.
func TestAnotherIdentitysSessionIsNotFound(t *testing.T) {
	o := &replicaOptions{keys: newTestRing(t), auth: func() *Access {
		ko := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}}
		servers := func(context.Context, string) ([]string, error) { return []string{testServer}, nil }
		return NewAccess(kubeauth.NewAuthenticator(allowAll{}, ko), kubeauth.NewAuthorizer(allowAll{}, ko), servers, ko)
	}}
	alice, bob := agentToken("alice"), agentToken("bob")
	o.token.Store(&alice)
	p := newReplicas(t, o)
	sid := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	o.token.Store(&bob)
	if code, on, body := p.request(t, http.MethodPost, testNS, sid, listTools); code != http.StatusNotFound || on != "b" {
		t.Fatalf("bob with alice's session: status %d on %s, want 404 on b: %s", code, on, body)
	}
	o.token.Store(&alice)
	if code, on, body := p.request(t, http.MethodPost, testNS, sid, listTools); code != http.StatusOK || on != "b" {
		t.Fatalf("alice with her session: status %d on %s, want 200 on b: %s", code, on, body)
	}
}

// A session deleted on the replica that took it up is not taken up there
// again.
func TestADeletedSessionIsNotTakenUpAgain(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	sid := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	if code, _, body := p.request(t, http.MethodDelete, testNS, sid, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on B: status %d: %s", code, body)
	}
	if code, on, body := p.request(t, http.MethodPost, testNS, sid, listTools); code != http.StatusNotFound || on != "b" {
		t.Fatalf("after DELETE: status %d on %s, want 404 on b: %s", code, on, body)
	}
}

// A session deleted on one replica is ended on the others, as the manager
// tells them: one that had taken it up closes it, and one that had not
// does not take it up.
func TestADeletedSessionIsEndedOnEveryReplica(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	tell := func(to *Gateway) func([]string, time.Time) {
		return func(keys []string, until time.Time) {
			ended := map[string]time.Time{}
			for _, k := range keys {
				ended[k] = until
			}
			to.EndedElsewhere(ended)
		}
	}
	p.a.g.SessionsEnded, p.b.g.SessionsEnded = tell(p.b.g), tell(p.a.g)

	held := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	if code, on, body := p.request(t, http.MethodPost, testNS, held, listTools); code != http.StatusOK || on != "b" {
		t.Fatalf("taking the session up on B: status %d on %s: %s", code, on, body)
	}
	p.to(p.a)
	if code, _, body := p.request(t, http.MethodDelete, testNS, held, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on A: status %d: %s", code, body)
	}
	p.to(p.b)
	if code, on, body := p.request(t, http.MethodPost, testNS, held, listTools); code != http.StatusNotFound || on != "b" {
		t.Fatalf("B still serves a session deleted on A: status %d on %s: %s", code, on, body)
	}

	p.to(p.a)
	unseen := connectAgent(t, p.url, p.hc, statefulProto).ID()
	if code, _, body := p.request(t, http.MethodDelete, testNS, unseen, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on A: status %d: %s", code, body)
	}
	p.to(p.b)
	if code, on, body := p.request(t, http.MethodPost, testNS, unseen, listTools); code != http.StatusNotFound || on != "b" {
		t.Fatalf("B took up a session deleted on A: status %d on %s: %s", code, on, body)
	}
}

// Taking a session up counts against the identity's session budget.
func TestTakingUpASessionIsWithinTheSessionBudget(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	first := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	p.b.g.Budgets.SessionsPerIdentity = 1
	// B's endpoint is made now, with the budget of 1.
	if code, _, body := p.request(t, http.MethodPost, testNS, first, listTools); code != http.StatusOK {
		t.Fatalf("the first session on B: status %d: %s", code, body)
	}
	p.to(p.a)
	second := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	if code, _, body := p.request(t, http.MethodPost, testNS, second, listTools); code != http.StatusTooManyRequests {
		t.Fatalf("a second session on B over its budget: status %d, want 429: %s", code, body)
	}
}

// open refuses ids past their age or issued too far ahead (a replica's
// clock may be off by a minute, not by hours), and ids too long to be ours.
func TestSealedIdsExpire(t *testing.T) {
	ring := newTestRing(t)
	now := time.Unix(1_800_000_000, 0)
	s := &sealer{keys: ring, maxAge: time.Hour, now: func() time.Time { return now }}
	params := &mcp.InitializeParams{ProtocolVersion: statefulProto, ClientInfo: &mcp.Implementation{Name: "a", Version: "1"}}
	for _, tc := range []struct {
		name   string
		issued time.Time
		opens  bool
	}{
		{"just issued", now, true},
		{"within its age", now.Add(-time.Hour + time.Second), true},
		{"past its age", now.Add(-time.Hour - time.Second), false},
		{"a minute ahead", now.Add(time.Minute), true},
		{"hours ahead", now.Add(3 * time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid, ok := s.seal(&sealedState{Identity: identityHash(""), Namespace: testNS, Params: params, IssuedAt: tc.issued.Unix()})
			if !ok {
				t.Fatal("not sealed")
			}
			if _, opens := s.open(sid, testNS); opens != tc.opens {
				t.Fatalf("opens %v, want %v", opens, tc.opens)
			}
		})
	}
	big := &mcp.InitializeParams{ProtocolVersion: statefulProto, Capabilities: &mcp.ClientCapabilities{
		Experimental: map[string]any{"x": strings.Repeat("x", 4*maxSealedState)}}}
	if _, ok := s.seal(&sealedState{Namespace: testNS, Params: sealedParams(big, true), IssuedAt: now.Unix()}); ok {
		t.Fatal("a state larger than the bound was sealed")
	}
	sid, ok := s.seal(&sealedState{Namespace: testNS, Params: sealedParams(big, false), IssuedAt: now.Unix()})
	if !ok || len(sid) > maxSessionIDLen {
		t.Fatalf("the cut state: sealed %v, id of %d characters (bound %d)", ok, len(sid), maxSessionIDLen)
	}
	if _, ok := s.open(strings.Repeat("A", maxSessionIDLen+4), testNS); ok {
		t.Fatal("an over-long id opened")
	}
}

// Requests that arrive at once with an id B does not hold make one session
// there.
func TestConcurrentRequestsTakeASessionUpOnce(t *testing.T) {
	p := newReplicas(t, &replicaOptions{keys: newTestRing(t)})
	sid := connectAgent(t, p.url, p.hc, statefulProto).ID()
	p.to(p.b)
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		// Distinct ids: the SDK refuses an id already in flight on the session.
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 100+i)
		wg.Go(func() { codes[i], _, _ = p.request(t, http.MethodPost, testNS, sid, body) })
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	v, release, err := p.b.g.view(context.Background(), testNS, grant{all: true})
	if err != nil {
		t.Fatal(err)
	}
	release()
	count := 0
	for ss := range v.server.Sessions() {
		if ss.ID() == sid {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("B holds %d sessions of the id, want 1", count)
	}
}
