package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcpbridge/operator/internal/registry"
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
	g := &Gateway{Registry: registry.New(), MaxBodyBytes: 1024}
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
	h := (&Gateway{Registry: registry.New(), Auth: &Access{}}).Handler()
	for _, auth := range []string{"", "Basic dXNlcjpwdw==", "Bearer ", "Bearer"} {
		rec := post(t, h, "/namespaces/agents/mcp", initialize, map[string]string{"Authorization": auth})
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: status %d, WWW-Authenticate %q", auth, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	}
}

// The gateway's HTTP server closes a connection that sends no request
// headers within ReadHeaderTimeout, and a kept-alive connection without a
// next request after IdleTimeout.
func TestHTTPServerClosesSilentAndIdleConnections(t *testing.T) {
	g := &Gateway{Registry: registry.New(), ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	srv := g.httpServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	closedWithin := func(t *testing.T, c net.Conn, limit time.Duration) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(limit))
		start := time.Now()
		_, err := io.Copy(io.Discard, c)
		if err != nil { // a deadline: the server kept the connection
			t.Fatalf("the connection is still open after %s: %v", time.Since(start).Round(time.Millisecond), err)
		}
	}
	t.Run("silent", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("POST /namespaces/agents/mcp HTTP/1.1\r\n")) // and no more
		closedWithin(t, c, 5*time.Second)
	})
	t.Run("idle", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatal("the server closed the connection after the answer; it should keep it alive")
		}
		closedWithin(t, c, 5*time.Second)
	})
}

// While the gateway drains, every answer closes its connection, so that an
// agent's next POST never races Shutdown's close of an idle connection
// here: an answer through the SDK, whose SSE answers say "Connection:
// keep-alive", and the answer of a call that began before the drain.
func TestAnswersWhileDrainingCloseTheirConnection(t *testing.T) {
	env := newTestEnv(t, envOptions{})
	release := make(chan struct{})
	env.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		select {
		case <-release:
			return json.RawMessage(defaultResult), false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	})
	sid := env.agent(statefulProto).ID()
	listed := `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	stateful := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": statefulProto}
	post := func(body string, header map[string]string) (*http.Response, error) {
		resp, _, err := env.postResponse(context.Background(), body, header)
		return resp, err
	}
	if resp, err := post(listed, stateful); err != nil || resp.Close {
		t.Fatalf("an answer before the drain closed its connection (%v)", err)
	}
	body, header := sessionlessCall(8, echoPublic, `{}`)
	type answer struct {
		resp *http.Response
		err  error
	}
	before := make(chan answer, 1)
	go func() {
		resp, err := post(body, header)
		before <- answer{resp, err}
	}()
	waitFor(t, "the call to reach the upstream", func() bool { n, _ := env.fake.counts(); return n == 1 })

	env.g.draining.Store(true)
	closed := func(what string, resp *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("%s: %s, Connection %q", what, resp.Status, resp.Header.Get("Connection"))
		}
	}
	resp, err := post(listed, stateful)
	closed("the SDK's answer while draining", resp, err)
	close(release)
	a := <-before
	closed("the answer of a call begun before the drain", a.resp, a.err)
}

// Once the drain delay is over, a request that reaches a connection the
// gateway had accepted is still answered (closing the connection), not cut
// under the agent, whose HTTP client would not send a POST again.
func TestDrainAnswersARequestOnAnAcceptedConnection(t *testing.T) {
	g := &Gateway{Registry: registry.New(), DrainDelay: 50 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &drainingServer{g: g, srv: g.httpServer(), ln: ln}
	accepted := make(chan struct{}, 1)
	track := d.srv.ConnState
	d.srv.ConnState = func(c net.Conn, s http.ConnState) {
		if track != nil {
			track(c, s)
		}
		if s == http.StateNew {
			select {
			case accepted <- struct{}{}:
			default: // the test's own dials that find the listener still open
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClosed(t, "the connection accepted", accepted)

	cancel()
	waitFor(t, "the listener to close after the drain delay", func() bool {
		probe, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			probe.Close()
		}
		return err != nil
	})
	req := "POST /namespaces/agents/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nContent-Length: " + strconv.Itoa(len(initialize)) + "\r\n\r\n" + initialize
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if !resp.Close {
		t.Errorf("status %d without Connection: close", resp.StatusCode)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("the drain did not end after %s", waitLimit)
	}
}
