package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
)

// TestARefusedCallersConnectionIsReadAgainOnlyAfterThePause: a refusal
// (HTTP 429, or a tools/call a budget refused with a JSON-RPC error) is
// answered at once; the next request on the same connection is read only
// RefusalPause after it, while a request on another connection, sent after
// it, is answered first.
func TestARefusedCallersConnectionIsReadAgainOnlyAfterThePause(t *testing.T) {
	const pause = 2 * time.Second
	for _, tc := range []struct {
		name    string
		budgets Budgets
		refuse  func(t *testing.T, e *testEnv, c *rawConn)
	}{
		{"a 429 (sessions)", Budgets{SessionsPerIdentity: 1}, func(t *testing.T, e *testEnv, c *rawConn) {
			e.agent(statefulProto)
			code, _ := c.post(t, initializeBody, map[string]string{"Mcp-Protocol-Version": ""})
			NewWithT(t).Expect(code).To(Equal(http.StatusTooManyRequests))
		}},
		{"a JSON-RPC refusal (calls in flight)", Budgets{CallsPerIdentity: 1}, func(t *testing.T, e *testEnv, c *rawConn) {
			gt := newGate()
			t.Cleanup(func() { close(gt.open) })
			e.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
				if err := gt.enter(ctx); err != nil {
					return nil, false, err
				}
				return json.RawMessage(defaultResult), false, nil
			})
			e.callInBackground(1)
			NewWithT(t).Eventually(gt.count, waitLimit).Should(Equal(1))
			call, hdr := sessionlessCall(2, echoPublic, `{}`)
			code, body := c.post(t, call, hdr)
			NewWithT(t).Expect(code).To(Equal(http.StatusOK))
			rc, _ := rpcError(t, body)
			NewWithT(t).Expect(rc).To(BeEquivalentTo(codeBudget))
			e.fake.setHandle(nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newTestEnv(t, envOptions{budgets: tc.budgets})
			e.g.RefusalPause = pause
			addr := servePaced(t, e.g)
			refused, other := dialRaw(t, addr), dialRaw(t, addr)

			tc.refuse(t, e, refused)
			g.Expect(readAgainAfter(t, refused, other)).To(BeNumerically(">=", pause), "read again only after the pause")
		})
	}
}

// servePaced serves g as the manager does (Server: paced connections) on
// a loopback port and returns its address.
func servePaced(t *testing.T, g *Gateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, ln := g.Server(ln)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// rawConn is one kept-alive connection to the gateway, on which the test
// decides what is sent when.
type rawConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{addr: addr, c: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, body string, header map[string]string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "POST /namespaces/%s/mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n", testNS, c.addr, len(body))
	for k, v := range header {
		if v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		t.Error(err)
	}
}

func (c *rawConn) read(t *testing.T) (int, []byte) {
	_ = c.c.SetReadDeadline(time.Now().Add(waitLimit))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, body
}

func (c *rawConn) post(t *testing.T, body string, header map[string]string) (int, []byte) {
	t.Helper()
	c.send(t, body, header)
	return c.read(t)
}

func TestPauseAfterALargeRefusedBody(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want time.Duration
	}{
		{-1, DefaultRefusalPause},
		{0, DefaultRefusalPause},
		{64 << 10, DefaultRefusalPause},
		{1 << 20, 250 * time.Millisecond},
		{4 << 20, time.Second},
		{1 << 40, 1 << 32 * time.Second / refusedBytesPerSecond},
	} {
		if got := pauseAfter(DefaultRefusalPause, tc.n); got != tc.want {
			t.Errorf("pauseAfter(%v, %d) = %v, want %v", DefaultRefusalPause, tc.n, got, tc.want)
		}
	}
}

// TestALargeRefusedRequestPausesItsConnectionLonger: a request of 2 MiB
// refused once read (its million values would pass the budget once the SDK
// decoded them) keeps its connection unread for half a second, however
// short the pause of a small one, while another connection is answered. (A
// body refused by its length alone is not read, and net/http closes its
// connection.)
func TestALargeRefusedRequestPausesItsConnectionLonger(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: 8 << 20}})
	e.g.RefusalPause = time.Millisecond
	addr := servePaced(t, e.g)
	refused, other := dialRaw(t, addr), dialRaw(t, addr)
	big, hdr := sessionlessList("[" + strings.Repeat("0,", 1<<20) + "0]")
	code, _ := refused.post(t, big, hdr)
	g.Expect(code).To(Equal(http.StatusTooManyRequests))
	g.Expect(readAgainAfter(t, refused, other)).To(BeNumerically(">=", time.Duration(len(big))*time.Second/refusedBytesPerSecond),
		"read again only after the body's pause")
}

// readAgainAfter sends a small list on the refused connection and then on
// other, expects other's answer first, and returns how long after the
// call the refused connection's came: its next request waits, another
// connection's, sent after it, does not.
func readAgainAfter(t *testing.T, refused, other *rawConn) time.Duration {
	t.Helper()
	g := NewWithT(t)
	answered := time.Now()
	list, hdr := sessionlessList("null")
	refused.send(t, list, hdr)
	other.send(t, list, hdr)
	first := make(chan string, 2)
	go func() { refused.read(t); first <- "refused" }()
	go func() { other.read(t); first <- "other" }()
	g.Expect(<-first).To(Equal("other"), "the other connection was answered first")
	g.Expect(<-first).To(Equal("refused"))
	return time.Since(answered)
}

// TestALargeBodyReadInVainPutsOffTheNamespacesLargeBodiesOnEveryConnection:
// after a request of 2 MiB is refused once read, or served by the SDK's
// path (which decodes it several times), a large body sent to the same
// namespace on a new connection, with a length or without one, is refused
// with 429 before it is read (the test sends only its first kilobyte, then
// ends the stream: a gateway that read it would meet the end of the
// stream instead), and that 429 is not held back by its own connection's
// pause, which starts once the answer is done; a small request of the
// namespace, and a large one of another namespace, are served.
func TestALargeBodyReadInVainPutsOffTheNamespacesLargeBodiesOnEveryConnection(t *testing.T) {
	for _, tc := range []struct {
		name, pad string
		code      int
	}{
		{"refused once read", "[" + strings.Repeat("0,", 1<<20) + "0]", http.StatusTooManyRequests},
		{"decoded by the SDK", `"` + strings.Repeat("x", 2<<20) + `"`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newTestEnv(t, envOptions{budgets: Budgets{ResultBytesPerNamespace: 8 << 20}})
			e.g.RefusalPause = time.Hour // the namespace's pause too: no test runs that long
			addr := servePaced(t, e.g)
			big, hdr := sessionlessList(tc.pad)
			code, _ := dialRaw(t, addr).post(t, big, hdr)
			g.Expect(code).To(Equal(tc.code))

			for _, length := range []string{strconv.Itoa(len(big)), "chunked"} {
				c := dialRaw(t, addr)
				c.sendPart(t, testNS, length, big[:1024], hdr)
				code, body := c.read(t)
				g.Expect(code).To(Equal(http.StatusTooManyRequests), "a body of length %s: %s", length, body)
				g.Expect(string(body)).To(ContainSubstring("refused unread"))
			}
			small, _ := sessionlessList("null")
			code, _ = dialRaw(t, addr).post(t, small, hdr)
			g.Expect(code).To(Equal(http.StatusOK), "a small request of the namespace")
			few, _ := sessionlessList(`"` + strings.Repeat("x", 2<<20) + `"`)
			c := dialRaw(t, addr)
			c.sendPart(t, "other", strconv.Itoa(len(few)), few, hdr)
			code, body := c.read(t)
			g.Expect(code).To(Equal(http.StatusOK), "a large request of another namespace: %s", body)
		})
	}
}

// TestLargeCallsOnTheFastPathAreNotPaced: tools/calls of 2 MiB of
// arguments, which the fast path reads and checks once, are served one
// after the other on new connections.
func TestLargeCallsOnTheFastPathAreNotPaced(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{})
	e.g.RefusalPause = time.Hour
	addr := servePaced(t, e.g)
	call, hdr := sessionlessCall(2, echoPublic, `{"blob":"`+strings.Repeat("x", 2<<20)+`"}`)
	for i := range 3 {
		code, body := dialRaw(t, addr).post(t, call, hdr)
		g.Expect(code).To(Equal(http.StatusOK), "call %d", i)
		g.Expect(string(body)).To(And(ContainSubstring(`"result"`), Not(ContainSubstring(`"error"`))), "call %d", i)
	}
}

// sendPart sends a POST to ns whose body is part, with a Content-Length of
// length or, for "chunked", in one chunk, and then ends the stream.
func (c *rawConn) sendPart(t *testing.T, ns, length, part string, header map[string]string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "POST /namespaces/%s/mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\n", ns, c.addr)
	if length == "chunked" {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	} else {
		b.WriteString("Content-Length: " + length + "\r\n")
	}
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if length == "chunked" {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(part), part)
	} else {
		b.WriteString(part)
	}
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		t.Error(err)
	}
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Error(err)
	}
}

// TestTheSDKDecodesOneLargeBodyOfANamespaceAtATime: while a call of 1 MiB
// that the SDK's path serves waits on its upstream, another large body of
// the namespace that only the SDK decodes is refused with 429 once read,
// even when the namespace's pause is over; once the call is answered, the
// next is served.
func TestTheSDKDecodesOneLargeBodyOfANamespaceAtATime(t *testing.T) {
	g := NewWithT(t)
	e := newTestEnv(t, envOptions{})
	addr := servePaced(t, e.g)
	gt := newGate()
	release := sync.OnceFunc(func() { close(gt.open) })
	e.fake.setSDKHandle(func(ctx context.Context) (*mcp.CallToolResult, error) {
		if err := gt.enter(ctx); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	cs := e.agent(statefulProto)
	t.Cleanup(release) // before the agent's Close, which waits for the call
	called := make(chan error, 1)
	go func() { // a tool that binds a header: the SDK's path
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: regionPublic,
			Arguments: map[string]any{"region": "eu", "blob": strings.Repeat("x", 1<<20)}})
		called <- err
	}()
	g.Eventually(gt.count, waitLimit).Should(Equal(1))

	list, hdr := sessionlessList(`"` + strings.Repeat("x", 1<<20) + `"`)
	paceOver := func() { // white-box: the pause the call earned, over
		e.g.mu.Lock()
		defer e.g.mu.Unlock()
		e.g.endpoints[testNS].bodies.until.Store(0)
	}
	paceOver()
	code, body := dialRaw(t, addr).post(t, list, hdr)
	g.Expect(code).To(Equal(http.StatusTooManyRequests))
	g.Expect(string(body)).To(ContainSubstring("decodes one at a time"))

	release()
	g.Expect(<-called).To(Succeed())
	// The refusal's own pause may be noted after its answer was read.
	g.Eventually(func(g Gomega) {
		paceOver()
		code, body := dialRaw(t, addr).post(t, list, hdr)
		g.Expect(code).To(Equal(http.StatusOK), "%s", body)
	}, waitLimit).Should(Succeed())
}
