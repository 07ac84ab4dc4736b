package bridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/test/fixture"
)

// postServer is an httptest server that counts the connections it
// accepted and closed.
type postServer struct {
	*httptest.Server
	accepted, closed atomic.Int64
}

func newPostServer(t *testing.T, h http.HandlerFunc, idleTimeout time.Duration) *postServer {
	t.Helper()
	s := &postServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.IdleTimeout = idleTimeout
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newTestPosts(t *testing.T) *inlineTransport {
	t.Helper()
	pt := &inlineTransport{base: &http.Transport{}, dial: (&net.Dialer{}).DialContext, proxy: http.ProxyFromEnvironment}
	t.Cleanup(pt.shut)
	return pt
}

// postOnce posts body and returns the answer's body read whole.
func postOnce(ctx context.Context, rt http.RoundTripper, url, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func echoBody(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func TestPostsReuseOneConnectionForEveryKindOfAnswer(t *testing.T) {
	answers := map[string]http.HandlerFunc{
		"content length": echoBody,
		"chunked": func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for _, part := range [][]byte{b[:1], b[1:]} {
				_, _ = w.Write(part)
				w.(http.Flusher).Flush()
			}
		},
		"after an informational answer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			echoBody(w, r)
		},
	}
	for name, h := range answers {
		t.Run(name, func(t *testing.T) {
			srv := newPostServer(t, h, 0)
			pt := newTestPosts(t)
			for i, body := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
				got, err := postOnce(t.Context(), pt, srv.URL, body)
				if err != nil || got != body {
					t.Fatalf("post %d: %q, %v; want %q", i, got, err, body)
				}
			}
			if n := srv.accepted.Load(); n != 1 {
				t.Errorf("%d connections accepted for three posts, want 1", n)
			}
		})
	}
}

// TestPostsKeepNoGoroutineOfTheirOwn: net/http's client keeps a read and a
// write goroutine for every pooled connection; ours keeps none, and a post
// runs on the goroutine that asks.
func TestPostsKeepNoGoroutineOfTheirOwn(t *testing.T) {
	srv := newPostServer(t, echoBody, 0)
	pt := newTestPosts(t)
	if _, err := postOnce(t.Context(), pt, srv.URL, `{}`); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if strings.Contains(stacks, "persistConn") {
		t.Errorf("a net/http connection goroutine runs after a post:\n%s", stacks)
	}
	if n := len(pooled(pt)); n != 1 {
		t.Errorf("%d idle connections, want 1", n)
	}
}

func TestAPostAfterTheServerClosedTheIdleConnectionDialsAgain(t *testing.T) {
	// As a Node.js server does after its keep-alive timeout (5 s).
	srv := newPostServer(t, echoBody, 20*time.Millisecond)
	pt := newTestPosts(t)
	if _, err := postOnce(t.Context(), pt, srv.URL, `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	httpPoll(t, "the server to close the idle connection", func() bool { return srv.closed.Load() == 1 })
	got, err := postOnce(t.Context(), pt, srv.URL, `{"n":2}`)
	if err != nil || got != `{"n":2}` {
		t.Fatalf("the post after the close: %q, %v", got, err)
	}
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("%d connections accepted, want 2", n)
	}
}

func TestAConnectionIsNotPooledUnlessItsAnswerWasReadWhole(t *testing.T) {
	cases := map[string]struct {
		h    http.HandlerFunc
		read func(io.Reader) // what the caller reads before it closes the body
	}{
		"closed before its end": {
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: 1\n\n"))
				w.(http.Flusher).Flush()
				<-r.Context().Done() // a stream that does not end by itself
			},
			read: func(r io.Reader) { _, _ = r.Read(make([]byte, 4)) },
		},
		"the server closes it": {
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				echoBody(w, r)
			},
			read: func(r io.Reader) { _, _ = io.ReadAll(r) },
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newPostServer(t, c.h, 0)
			pt := newTestPosts(t)
			for i := range 2 {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{}`))
				resp, err := pt.RoundTrip(req)
				if err != nil {
					t.Fatalf("post %d: %v", i, err)
				}
				c.read(resp.Body)
				resp.Body.Close()
				httpPoll(t, "the connection to close", func() bool { return srv.closed.Load() == int64(i+1) })
			}
			if n := srv.accepted.Load(); n != 2 {
				t.Errorf("%d connections accepted for two posts, want 2", n)
			}
		})
	}
}

func TestACancelledPostEndsAtOnceAndClosesItsConnection(t *testing.T) {
	var once sync.Once
	arrived := make(chan struct{})
	srv := newPostServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http's server sees the client go only once the body was read
		once.Do(func() { close(arrived) })
		<-r.Context().Done()
	}, 0)
	pt := newTestPosts(t)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-arrived; cancel() }()
	_, err := postOnce(ctx, pt, srv.URL, `{}`)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	httpPoll(t, "the server to see the connection closed", func() bool { return srv.closed.Load() == 1 })
	if n := len(pooled(pt)); n != 0 {
		t.Errorf("%d idle connections after a cancelled post, want 0", n)
	}
}

func TestAnswerHeadersOverTheLimitAreRefused(t *testing.T) {
	srv := newPostServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", maxResponseHeaderBytes+connBufferSize+1))
		echoBody(w, r)
	}, 0)
	_, err := postOnce(t.Context(), newTestPosts(t), srv.URL, `{}`)
	if !errors.Is(err, errHeadersTooLarge) {
		t.Fatalf("err = %v, want %v", err, errHeadersTooLarge)
	}
}

func TestWhichRequestsAreSentOnTheCallersGoroutine(t *testing.T) {
	small, big := []byte(`{}`), bytes.Repeat([]byte("a"), postBodyLimit+1)
	proxied := func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.example:3128") }
	cases := []struct {
		name   string
		method string
		url    string
		body   []byte
		close  bool
		proxy  bool
		want   bool
	}{
		{name: "a small POST over plain HTTP", method: http.MethodPost, url: "http://127.0.0.1:1/mcp", body: small, want: true},
		{name: "a GET (the SDK's stream)", method: http.MethodGet, url: "http://127.0.0.1:1/mcp", want: true},
		{name: "a GET with a body", method: http.MethodGet, url: "http://127.0.0.1:1/mcp", body: small},
		{name: "a GET over TLS", method: http.MethodGet, url: "https://127.0.0.1:1/mcp"},
		{name: "a GET through a proxy", method: http.MethodGet, url: "http://127.0.0.1:1/mcp", proxy: true},
		{name: "a DELETE", method: http.MethodDelete, url: "http://127.0.0.1:1/mcp"},
		{name: "over TLS", method: http.MethodPost, url: "https://127.0.0.1:1/mcp", body: small},
		{name: "a body over the limit", method: http.MethodPost, url: "http://127.0.0.1:1/mcp", body: big},
		{name: "no body", method: http.MethodPost, url: "http://127.0.0.1:1/mcp"},
		{name: "asks to close", method: http.MethodPost, url: "http://127.0.0.1:1/mcp", body: small, close: true},
		{name: "through a proxy", method: http.MethodPost, url: "http://127.0.0.1:1/mcp", body: small, proxy: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pt := &inlineTransport{proxy: http.ProxyFromEnvironment}
			if c.proxy {
				pt.proxy = proxied
			}
			var body io.Reader
			if c.body != nil {
				body = bytes.NewReader(c.body)
			}
			req, _ := http.NewRequest(c.method, c.url, body)
			req.Close = c.close
			if got := pt.fits(req); got != c.want {
				t.Errorf("fits = %v, want %v", got, c.want)
			}
		})
	}
}

// A connected Streamable HTTP server keeps none of net/http's connection
// goroutines: its GET stream is read by the SDK's reader, and its calls,
// probes and listings are posted on a connection that keeps none
// (docs/design.md, "Tool calls").
func TestAConnectedServerKeepsNoConnectionGoroutines(t *testing.T) {
	g := NewWithT(t)
	up := httpServe(t, httpFixture(t, fixture.Options{})) // stateful: the client opens a GET stream
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	httpEcho(t, s, "first")
	httpEcho(t, s, "second")
	g.Eventually(up.requests, eventually).Should(ContainElement(HaveField("Method", http.MethodGet)), "a GET stream")
	persistConns := func() map[string]int {
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return map[string]int{
			"readLoop":  strings.Count(stacks, "net/http.(*persistConn).readLoop("),
			"writeLoop": strings.Count(stacks, "net/http.(*persistConn).writeLoop("),
		}
	}
	// net/http kept both for the stream's connection, and for the POSTs'
	// before that: {2, 2}.
	g.Eventually(persistConns, eventually).Should(Equal(map[string]int{"readLoop": 0, "writeLoop": 0}))
	httpEcho(t, s, "over the same stream") // still connected
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080/mcp": "127.0.0.1:8080",
		"http://example.test/mcp":   "example.test:80",
		"http://[::1]:8080/mcp":     "[::1]:8080",
		"http://[::1]/mcp":          "[::1]:80",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialAddr(u); got != want {
			t.Errorf("dialAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

// A pooled connection holds no buffer: its read buffer is given back when
// its answer was read whole, and a write buffer is held only while a
// request is written (docs/design.md, "Replicas and ownership", memory).
// A server that sends more than its answer has its connection closed, not
// pooled with those bytes buffered.
func TestAPooledConnectionHoldsNoBuffer(t *testing.T) {
	g := NewWithT(t)
	srv := newPostServer(t, echoBody, 0)
	pt := newTestPosts(t)
	for _, body := range []string{`{"first":1}`, `{"second":2}`} {
		got, err := postOnce(context.Background(), pt, srv.URL, body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(body))
		idle := pooled(pt)
		g.Expect(idle).To(HaveLen(1), "pooled")
		g.Expect(idle[0].br).To(BeNil(), "the pooled connection's read buffer")
	}
	g.Expect(srv.accepted.Load()).To(BeEquivalentTo(1), "one connection for both")

	extra := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n")
	other := newTestPosts(t) // a transport serves one server
	got, err := postOnce(context.Background(), other, "http://"+extra+"/mcp", `{}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(`{}`))
	g.Expect(pooled(other)).To(BeEmpty(), "a connection with bytes beyond its answer")
}

// pooled is a copy of pt's idle connections.
func pooled(pt *inlineTransport) []*inlineConn {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return slices.Clone(pt.idle)
}

// newRawServer answers every connection's first request with answer, as
// bytes, and keeps it open until the client closes it; it returns its
// address.
func newRawServer(t *testing.T, answer string) string {
	t.Helper()
	addr, _ := newStagedServer(t, answer)
	return addr
}

// A dial of a link that closed ends, and a connection it made is closed:
// net/http finishes dials its requests gave up on and pools what they
// make, where nothing would use or close it.
func TestADialEndsWithItsLink(t *testing.T) {
	t.Run("in progress", func(t *testing.T) {
		link, closeLink := context.WithCancel(context.Background())
		dial := dialWithin(link, func(ctx context.Context, _, _ string) (net.Conn, error) {
			closeLink()
			select { // a server that does not complete the handshake in time
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(eventually):
				ours, theirs := net.Pipe()
				theirs.Close()
				return ours, nil
			}
		})
		if _, err := dial(context.Background(), "tcp", "127.0.0.1:1"); err == nil {
			t.Fatal("the dial went on after its link closed")
		}
	})
	t.Run("made after", func(t *testing.T) {
		link, closeLink := context.WithCancel(context.Background())
		ours, theirs := net.Pipe()
		defer theirs.Close()
		dial := dialWithin(link, func(context.Context, string, string) (net.Conn, error) {
			closeLink()
			return ours, nil
		})
		if c, err := dial(context.Background(), "tcp", "127.0.0.1:1"); err == nil {
			c.Close()
			t.Fatal("a connection made after the link closed was handed out")
		}
		if _, err := ours.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("write to it: %v; want it closed", err)
		}
	})
}
