package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// Target is a replica to forward to: its name (its Lease's holder) and the
// address it advertises.
type Target struct {
	Name    string
	Address string
	// Process tells a replica restarted under the same name from its
	// previous process (membership.Member.Process); only the relay of
	// ended sessions reads it.
	Process string
}

// replicaAttr names the replica a forward went to, on its CLIENT span.
const replicaAttr = attribute.Key("mcpbridge.replica")

// The client's connections: HTTP/2, so that many calls at once to a peer
// share a connection (more are opened past the server's concurrent
// streams), and one the peer closes at shutdown hands back the calls it
// did not start, which the transport sends again on a new connection
// (their bodies can be replayed: http.NewRequest keeps GetBody). Idle
// connections are closed before the server would close them; a dial or
// handshake that hangs fails instead of waiting for the call's own
// deadline.
const (
	maxIdleConnsPerPeer = 64
	clientIdleTimeout   = 90 * time.Second
	dialTimeout         = 5 * time.Second
	handshakeTimeout    = 10 * time.Second
)

// A connection to a peer that went silent (its node gone, a partition:
// nothing closes the connection) is pinged after pingAfter without a
// frame and closed when the ping is not answered within pingTimeout, so
// that the calls on it fail instead of waiting for their callers'
// deadlines. Variables so that tests can shorten them.
var (
	pingAfter   = 10 * time.Second
	pingTimeout = 5 * time.Second
)

// Client forwards calls to other replicas. One Client serves every
// forwarding caller of a replica; it is safe for concurrent use.
type Client struct {
	id     *identity
	http   *http.Client
	tracer tracing.Tracer
	log    logr.Logger

	dialer *net.Dialer

	mu    sync.Mutex
	reach map[string]reach // by peer name: whether its last forward or probe got an answer
}

func newClient(id *identity, tracer tracing.Tracer, log logr.Logger) *Client {
	c := &Client{id: id, tracer: tracer, log: log, reach: map[string]reach{},
		dialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}}
	c.http = &http.Client{Transport: &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return c.dialTLS(ctx, c.dialer, network, addr)
		},
		MaxIdleConnsPerHost: maxIdleConnsPerPeer,
		IdleConnTimeout:     clientIdleTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingTimeout},
	}}
	return c
}

// dialTLS dials addr and completes the handshake with the replica's
// certificate and trust as they are now, so that a re-issued certificate
// (or a new CA) is used from the next connection on.
func (c *Client) dialTLS(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	cfg, err := c.id.clientTLS()
	if err != nil {
		return nil, &dialError{err}
	}
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &dialError{err}
	}
	conn := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, &dialError{err}
	}
	return conn, nil
}

// Call forwards call to the replica to and returns the owner's answer: the
// CallToolResult's JSON exactly as the owner's caller returned it, and
// whether it is a tool error. It fails with ErrNotServedHere when to does
// not serve the owner, a *CallError when the owner's caller failed,
// ErrUnreachable when no answer came (with ErrNotSent too when no
// connection could be made), registry.ErrResultBudget when the
// result would pass ctx's ResultBytes (counted here, on the replica the
// agent called), or ctx's error. The trace context of ctx goes with it.
func (c *Client) Call(ctx context.Context, to Target, call Call) (result json.RawMessage, isError bool, err error) {
	ctx, span := c.tracer.Start(ctx, spanForward, trace.SpanKindClient)
	if span.IsRecording() {
		tracing.SetAttributes(span, semconv.McpMethodNameKey.String("tools/call"), semconv.GenAIToolName(call.Tool),
			tracing.Namespace.String(call.Namespace), replicaAttr.String(to.Name))
	}
	result, isError, outcome, err := c.do(ctx, to, &call)
	forwards.WithLabelValues(outcome).Inc()
	if span.IsRecording() {
		tracing.SetAttributes(span, tracing.Outcome.String(outcome))
		if err != nil {
			tracing.Fail(span, outcome, "the forward failed")
		}
	}
	span.End()
	return result, isError, err
}

func (c *Client) do(ctx context.Context, to Target, call *Call) (json.RawMessage, bool, string, error) {
	if to.Address == "" {
		return nil, false, outcomeCallError, fmt.Errorf("replica %s has no address", to.Name)
	}
	body, err := call.encode()
	if err != nil {
		return nil, false, outcomeCallError, fmt.Errorf("encode the forwarded call: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+to.Address+CallPath, bytes.NewReader(body))
	if err != nil {
		return nil, false, outcomeCallError, fmt.Errorf("the address of replica %s: %w", to.Name, err)
	}
	req.Header["Content-Type"] = []string{"application/json"}
	tracing.InjectHeader(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, outcomeCancelled, ctx.Err()
		}
		c.reached(to, err)
		return nil, false, outcomeUnreachable, &unreachableError{err: err}
	}
	c.reached(to, nil)
	defer func() { _ = resp.Body.Close() }()
	return readAnswer(ctx, resp)
}

// readAnswer reads the owner's answer; a result is counted into ctx's
// ResultBytes as it is read.
func readAnswer(ctx context.Context, resp *http.Response) (json.RawMessage, bool, string, error) {
	var rb registry.ResultBytes
	if resp.StatusCode == http.StatusOK {
		rb = registry.ResultBytesFrom(ctx)
	}
	b, err := readBody(resp, rb)
	switch {
	case errors.Is(err, registry.ErrResultBudget):
		return nil, false, outcomeCallError, err
	case err != nil && ctx.Err() != nil:
		return nil, false, outcomeCancelled, ctx.Err()
	case err != nil:
		return nil, false, outcomeUnreachable, &unreachableError{err: err}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var a answer
		if err := json.Unmarshal(b, &a); err != nil || len(a.Result) == 0 {
			return nil, false, outcomeCallError, errors.New("the owning replica's answer cannot be read")
		}
		if a.IsError {
			return a.Result, true, outcomeToolError, nil
		}
		return a.Result, false, outcomeSuccess, nil
	case http.StatusConflict:
		return nil, false, outcomeNotOwner, ErrNotServedHere
	}
	var f failure
	if json.Unmarshal(b, &f) == nil && f.Error == codeCallFailed {
		return nil, false, outcomeCallError, &CallError{Message: f.Message}
	}
	return nil, false, outcomeCallError, fmt.Errorf("the owning replica answered %s (%s)", resp.Status, f.Error)
}

// readBody reads at most maxAnswerBytes of resp's body, taking what it
// reads from rb (nil: uncounted): a known length at once, before anything
// is allocated for it. The body is read to its end, so that the
// connection goes back to the pool.
func readBody(resp *http.Response, rb registry.ResultBytes) ([]byte, error) {
	size := resp.ContentLength
	if size > maxAnswerBytes {
		return nil, fmt.Errorf("an answer of %d bytes is over the bound of %d", size, maxAnswerBytes)
	}
	if size < 0 {
		var r io.Reader = io.LimitReader(resp.Body, maxAnswerBytes)
		if rb != nil {
			r = &countingReader{r: r, rb: rb}
		}
		return io.ReadAll(r)
	}
	if rb != nil && !rb.Take(size) {
		return nil, registry.ErrResultBudget
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, err
	}
	_, err := io.Copy(io.Discard, resp.Body)
	return buf, err
}

// countingReader takes what it reads from rb.
type countingReader struct {
	r  io.Reader
	rb registry.ResultBytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.rb.Take(int64(n)) {
		return 0, registry.ErrResultBudget
	}
	return n, err
}

func gaugeBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// SendEnded tells the replica to of agent sessions this replica knows
// ended (at most maxEndedPerRequest). Whether it was reached is recorded
// as for a forward.
func (c *Client) SendEnded(ctx context.Context, to Target, ended []EndedSession) error {
	if to.Address == "" {
		return fmt.Errorf("replica %s has no address", to.Name)
	}
	body, err := json.Marshal(ended)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+to.Address+EndedPath, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the address of replica %s: %w", to.Name, err)
	}
	req.Header["Content-Type"] = []string{"application/json"}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.reached(to, err)
		}
		return &unreachableError{err: err}
	}
	c.reached(to, nil)
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("replica %s answered %s", to.Name, resp.Status)
	}
	return nil
}
