package gateway

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcpbridge/operator/internal/bridge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

func post(t *testing.T, h http.Handler, path, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Host = "127.0.0.1:8090"
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestGatewayRefusesBadRequestsBeforeMCP(t *testing.T) {
	g := &Gateway{Registry: bridge.NewRegistry(), MaxBodyBytes: 1024}
	defer g.closeSessions()
	h := g.Handler()
	cases := []struct {
		name   string
		path   string
		body   string
		header map[string]string
		want   int
	}{
		{"same-origin initialize is served", "/namespaces/agents/mcp", initialize, map[string]string{"Origin": "http://127.0.0.1:8090"}, http.StatusOK},
		{"localhost is served", "/namespaces/agents/mcp", initialize, map[string]string{"Host": "localhost:8090"}, http.StatusOK},
		{"a rebound name is refused without auth", "/namespaces/agents/mcp", initialize,
			map[string]string{"Host": "evil.example:8090", "Origin": "http://evil.example:8090"}, http.StatusForbidden},
		{"no Origin is served", "/namespaces/agents/mcp", initialize, nil, http.StatusOK},
		{"cross-origin is refused", "/namespaces/agents/mcp", initialize, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"an invalid namespace is not found", "/namespaces/Not_A_Namespace/mcp", initialize, nil, http.StatusNotFound},
		{"another path is not found", "/mcp", initialize, nil, http.StatusNotFound},
		{"an oversized body is refused", "/namespaces/agents/mcp", strings.Repeat(" ", 2048) + initialize, nil, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := post(t, h, tc.path, tc.body, tc.header).Code; got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
}

func TestGatewayWithAuthRefusesRequestsWithoutBearerToken(t *testing.T) {
	h := (&Gateway{Registry: bridge.NewRegistry(), Auth: &Authorizer{}}).Handler()
	for _, auth := range []string{"", "Basic dXNlcjpwdw==", "Bearer ", "Bearer"} {
		rec := post(t, h, "/namespaces/agents/mcp", initialize, map[string]string{"Authorization": auth})
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: status %d, WWW-Authenticate %q", auth, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	}
}

func TestAuthorizerCacheStaysBounded(t *testing.T) {
	a := &Authorizer{MaxEntries: 100}
	for i := range 1000 {
		a.remember(sha256.Sum256([]byte(fmt.Sprint(i))), http.StatusOK)
	}
	if n := len(a.cache().Keys()); n > 100 {
		t.Fatalf("cache holds %d entries, bound is 100", n)
	}
	key := sha256.Sum256([]byte("999"))
	if st, ok := a.cached(key); !ok || st != http.StatusOK {
		t.Fatalf("the newest answer was evicted")
	}
}

// An allow is remembered for TTL and a denial for DenyTTL, on the
// Authorizer's clock.
func TestAuthorizerRemembersAllowsLongerThanDenials(t *testing.T) {
	fc := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	a := &Authorizer{TTL: 30 * time.Second, DenyTTL: 5 * time.Second, Clock: fc}
	allow, deny, unauth := sha256.Sum256([]byte("allow")), sha256.Sum256([]byte("deny")), sha256.Sum256([]byte("unauth"))
	a.remember(allow, http.StatusOK)
	a.remember(deny, http.StatusForbidden)
	a.remember(unauth, http.StatusUnauthorized)
	for _, step := range []struct {
		after                        time.Duration
		allow, deny, unauthenticated bool
	}{
		{0, true, true, true},
		{5 * time.Second, true, true, true},
		{5*time.Second + time.Nanosecond, true, false, false},
		{30 * time.Second, true, false, false},
		{30*time.Second + time.Nanosecond, false, false, false},
	} {
		fc.SetTime(time.Unix(1_700_000_000, 0).Add(step.after))
		for _, c := range []struct {
			name string
			key  [sha256.Size]byte
			want bool
		}{{"allow", allow, step.allow}, {"deny", deny, step.deny}, {"unauthenticated", unauth, step.unauthenticated}} {
			if _, ok := a.cached(c.key); ok != c.want {
				t.Errorf("after %v: %s remembered = %v, want %v", step.after, c.name, ok, c.want)
			}
		}
	}
}
