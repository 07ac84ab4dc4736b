package bridge

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/tracing"
)

// httpDialer connects to a Streamable HTTP endpoint.
type httpDialer struct {
	spec   *policy.HTTP
	sniff  func([]byte) // optional: sees every line of every response body
	egress *egress.Policy
	// namespace is the McpServer's: its own Pods and Services are not
	// another tenant's.
	namespace string
	tracer    tracing.Tracer // a span per request of a traced operation
	// tls is nil (the system's roots) but in tests.
	tls *tls.Config
	// share is the namespace's (Options.Shares): the other events of the
	// answer streams wait for its pace, and the SDK's streams' lines; the
	// messages the SDK reads count against its budget of bytes being read.
	share *share
}

// maxResponseHeaderBytes bounds the headers of one answer of a server.
const maxResponseHeaderBytes = 64 << 10

func (d *httpDialer) dial(_ context.Context, onLost func(error)) (link, error) {
	// Every connection of the generation, the SDK's and the calls posted
	// as JSON alike, is dialled by this one transport, so the guard sees
	// each address it connects to. See docs/design.md, "Egress policy".
	guard := d.egress.Guard(d.namespace)
	ctx, cancel := context.WithCancel(context.Background())
	dial := dialWithin(ctx, (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		ControlContext: guard.Control}).DialContext)
	base := &http.Transport{
		Proxy:       guard.Proxy(http.ProxyFromEnvironment),
		DialContext: dial,
		// A custom dialer turns HTTP/2 off unless asked for. With it, a
		// server over TLS that offers HTTP/2 gets one connection for its
		// GET stream and its POSTs alike (over HTTP/1.1 the POSTs need a
		// second one), as with net/http's default transport. See
		// docs/design.md, "Replicas and ownership" (memory).
		ForceAttemptHTTP2: true,
		// net/http writes its protocols (h2) into the configuration it is
		// given, and every generation of a server has its own transport:
		// each gets its own copy, never one another is dialling with.
		TLSClientConfig:       d.tls.Clone(),
		MaxIdleConnsPerHost:   maxIdleConns,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // a call may legitimately take toolCallTimeoutMs
		// net/http's default is 10 MB, and the SDK keeps the session id a
		// server sends for the session's life (docs/design.md, "Budgets").
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		// A server over TLS, or behind a proxy, keeps its connections here
		// (over plain HTTP/1.1 they are inlineTransport's), each with a
		// read and a write buffer for as long as it is connected; bufio
		// passes reads and writes of more than a buffer through, so that
		// large messages lose nothing by smaller ones. See docs/design.md,
		// "Replicas and ownership" (memory).
		ReadBufferSize:  connBufferSize,
		WriteBufferSize: connBufferSize,
	}
	inline := &inlineTransport{base: base, dial: dial, proxy: http.ProxyFromEnvironment}
	rt := &sessionTransport{base: inline, headers: d.spec.Headers, onLost: onLost, linkCtx: ctx, sniff: d.sniff, tracer: d.tracer,
		getPace: newPace(), share: d.share}
	// No Client.Timeout: it would cut the SSE streams; every request
	// carries its own deadline instead.
	client := &http.Client{
		Transport: rt,
		// Never follow a redirect: the configured headers (often a Secret)
		// would go to whatever host it names.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	l := &httpLink{
		guard:  guard,
		inline: inline,
		cancel: cancel,
		client: client,
		url:    d.spec.URL,
		t:      &mcp.StreamableClientTransport{Endpoint: d.spec.URL, HTTPClient: client, MaxRetries: 2},
		done:   make(chan struct{}),
		share:  d.share,
	}
	return l, nil
}

type httpLink struct {
	guard  *egress.Guard
	inline *inlineTransport   // and the net/http transport beneath it
	cancel context.CancelFunc // ends every request of the generation
	client *http.Client       // the SDK's, shared by calls forwarded as JSON
	url    string
	ids    atomic.Int64 // ids of the requests we post ourselves (calls, probes)
	share  *share       // the namespace's: its pace and budget of bytes being read
	t      *mcp.StreamableClientTransport
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	closing bool
	notes   sync.WaitGroup // work that outlives its call: body drains, cancellations
}

// spawn runs fn unless the link is closing, and reports whether it did;
// the link is closed only once fn returned, and the requests fn makes end
// with the link.
func (l *httpLink) spawn(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.notes.Add(1)
	go func() {
		defer l.notes.Done()
		fn()
	}()
	return true
}

func (l *httpLink) transport() mcp.Transport { return l.t }

// refused is the destination the egress policy refused, if any: the reason
// a session could not start, which the transport error only wraps.
func (l *httpLink) refused() error {
	if r := l.guard.Refused(); r != nil {
		return r
	}
	return nil
}

// close drops pooled connections; the session itself is closed by the
// generation, and nothing else of ours outlives it.
func (l *httpLink) close() {
	l.once.Do(func() {
		// Closing the session may wait on requests (a DELETE, a
		// notifications/cancelled) that a hung server never answers.
		l.mu.Lock()
		l.closing = true
		l.mu.Unlock()
		l.cancel()
		l.inline.shut()
		// close must not block: the generation waits on done within the
		// close barrier.
		go func() {
			l.notes.Wait()
			// A drain that ended meanwhile put its connection back in the
			// pool, where nothing would use or close it.
			l.inline.CloseIdleConnections()
			close(l.done)
		}()
	})
}

func (l *httpLink) closed() <-chan struct{} { return l.done }

// dialWithin dials as dial does until link ends as well. net/http goes on
// with a dial that the request it was for gave up on, and pools the
// connection it makes; one made after the link closed its idle
// connections would stay open, unused, for idleConnTimeout.
func dialWithin(link context.Context, dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(link, cancel)
		defer stop()
		c, err := dial(ctx, network, addr)
		if err == nil && link.Err() != nil {
			c.Close()
			return nil, fmt.Errorf("dial %s: the connection to the server is closing", addr)
		}
		return c, err
	}
}

// connBufferSize is the read and write buffer of an upstream connection
// (net/http's default is 4 KiB each).
const connBufferSize = 1 << 10

// sessionDeleteTimeout bounds the DELETE that ends a session.
const sessionDeleteTimeout = time.Second

// sessionTransport adds the configured headers and reports session loss: a
// 404 to a request that carries a session id means the server forgot the
// session, whatever the body says.
// See docs/design.md, "Detecting loss".
type sessionTransport struct {
	base    http.RoundTripper
	headers []policy.Header
	onLost  func(error)
	linkCtx context.Context // ends when the generation closes
	sniff   func([]byte)
	tracer  tracing.Tracer
	// getPace paces the SDK's GET streams of the link together (nil: each
	// on its own): the server sets the delay before the SDK opens the next
	// one, so a pace of their own would restart with each.
	getPace *pace
	// share is the namespace's: the SDK's streams wait for its pace's
	// lines too, and what the SDK reads counts against its budget.
	share *share
}

func (t *sessionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet {
		armSessionEnd(req.Context()) // the SDK's GET stream: see sessionEnd
	}
	ctx, cancel := context.WithCancel(req.Context())
	if req.Method == http.MethodDelete {
		// Ending a session is a courtesy; a hung server must not hold the
		// close barrier for the SDK's 5 s DELETE timeout.
		ctx, cancel = context.WithTimeout(req.Context(), sessionDeleteTimeout)
	}
	ctx, span := t.startRequest(ctx, req)
	stop := context.AfterFunc(t.linkCtx, cancel)
	done := func() { stop(); cancel(); span.End() }
	if len(t.headers) > 0 || trace.SpanContextFromContext(ctx).IsValid() {
		req = req.Clone(ctx)                  // a RoundTripper must not change its caller's headers
		tracing.InjectHeader(ctx, req.Header) // before the configured headers, which win
		for _, h := range t.headers {
			req.Header.Set(h.Name, h.Value)
		}
	} else {
		req = req.WithContext(ctx) // no header to add: the headers need no copy
	}
	resp, err := t.base.RoundTrip(req)
	endRequest(span, resp, err)
	if err != nil {
		done()
		return nil, explainHTTP2(err)
	}
	if resp.StatusCode == http.StatusNotFound && req.Header.Get("Mcp-Session-Id") != "" {
		// The session id stays out of the message: status is widely readable.
		t.onLost(fmt.Errorf("the server no longer knows the session (HTTP 404): %w", mcp.ErrSessionMissing))
	}
	body := resp.Body
	sse := mediaType(resp.Header.Get("Content-Type")) == "text/event-stream"
	if !sse {
		// The SDK reads a JSON answer whole, with no bound (go-sdk
		// v1.8.0); it bounds an SSE event and a stdio frame at 16 MiB, and
		// so one answer is bounded here.
		body = &cappedBody{ReadCloser: body, left: maxMessageBytes}
	}
	sdkReads := req.Context().Value(unsniffedKey{}) == nil
	if sdkReads && t.share != nil {
		lease := t.share.reading.lease()
		body = &countedBody{ReadCloser: body, bytes: eventBytes{lease: lease, whole: !sse}, refusal: readRefusalOf(req.Context())}
		release := done
		done = func() { release(); lease.close() }
	}
	if sdkReads && sse {
		p := newPace() // see linesPerSecond
		if req.Method == http.MethodGet && t.getPace != nil {
			p = t.getPace
		}
		var shared *pace
		if t.share != nil {
			shared = t.share.pace
		}
		body = &pacedBody{pacedReader: pacedReader{r: body, ctx: ctx, pace: p, shared: shared}, Closer: body}
	}
	if t.sniff != nil && sdkReads {
		body = &sniffReader{ReadCloser: body, fn: t.sniff}
	}
	resp.Body = &releasingBody{ReadCloser: body, release: done}
	return resp, nil
}

// explainHTTP2 says what net/http's HTTP/2 client means by a compression
// error, which is all it says of an answer whose headers are over
// maxResponseHeaderBytes (over HTTP/1.1 it names the limit itself).
func explainHTTP2(err error) error {
	if !strings.Contains(err.Error(), "COMPRESSION_ERROR") {
		return err
	}
	return fmt.Errorf("%w (the server's answer has more than the %d KiB of headers an answer may have, or headers that are not validly compressed)",
		err, maxResponseHeaderBytes>>10)
}

// unsniffedKey marks a request whose answer the supervisor reads itself (a
// forwarded tools/call): it never carries a tool list, and sniffing it would
// hold a result of up to 16 MiB a second time, outside the result-byte budget
// (docs/design.md, "Budgets").
type unsniffedKey struct{}

func withoutSniff(ctx context.Context) context.Context {
	return context.WithValue(ctx, unsniffedKey{}, true)
}

// cappedBody fails with errTooLarge once more than left bytes arrive.
type cappedBody struct {
	io.ReadCloser
	left int
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, errTooLarge
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	return n, err
}

// inlineOf is the body of inlineTransport that sessionTransport's
// wrappers hold, or nil for an answer that came through net/http.
func inlineOf(body io.Reader) *inlineBody {
	for {
		switch b := body.(type) {
		case *inlineBody:
			return b
		case *releasingBody:
			body = b.ReadCloser
		case *cappedBody:
			body = b.ReadCloser
		case *sniffReader:
			body = b.ReadCloser
		default:
			return nil
		}
	}
}

// releasingBody releases its request's context once the body is closed:
// SSE streams live as long as their body.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
