package bridge

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// inlineTransport sends a generation's small POSTs and its GETs over
// plain HTTP/1.1 on the calling goroutine: the request is written and its
// answer read by the goroutine that asked, over a connection that keeps
// no goroutine of its own. net/http's client hands every request to its
// connection's write and read goroutines, which costs a call through the
// gateway as much as the rest of its hop, and keeps those two goroutines
// for every connection of every server: the pooled one of the POSTs and
// the GET stream's, open for as long as the server is connected. Everything
// else (DELETEs, TLS, a proxy from the environment, bodies of unknown or
// large size) goes to base. See docs/design.md, "Tool calls".
type inlineTransport struct {
	base  *http.Transport
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	proxy func(*http.Request) (*url.URL, error)

	mu     sync.Mutex
	idle   []*inlineConn // most recently used last
	closed bool
}

// postBodyLimit is the largest request body sent this way: a request
// written whole before its answer is read must fit the socket's buffers,
// or a server that answers before reading it (413) would be waited on.
const postBodyLimit = 64 << 10

// maxIdleConns and idleConnTimeout bound the idle connections of both
// transports: above maxIdleConns, concurrent calls redial every time.
const (
	maxIdleConns    = 64
	idleConnTimeout = 90 * time.Second
)

// errHeadersTooLarge is net/http's own refusal of an answer whose headers
// are over maxResponseHeaderBytes.
var errHeadersTooLarge = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxResponseHeaderBytes)

// inlineConn is one connection. Its read buffer is taken while a request
// uses it (a GET stream's, for the stream's life) and given back while it
// waits in the pool; its write buffer only while a request is written. An
// idle connection holds neither: see docs/design.md, "Replicas and
// ownership" (memory).
type inlineConn struct {
	conn     net.Conn
	lim      *headerLimit
	br       *bufio.Reader // nil while pooled
	idleAt   time.Time
	deadline bool // settle set a read deadline
}

// connReaders and connWriters are the buffers of the connections in use.
var (
	connReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, connBufferSize) }}
	connWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, connBufferSize) }}
)

func (t *inlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.fits(req) {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	pc, err := t.get(ctx, dialAddr(req.URL))
	if err != nil {
		closeBody(req)
		return nil, err
	}
	// A call's deadline or cancellation ends its reads and writes; the
	// connection is then closed, not pooled.
	stop := context.AfterFunc(ctx, func() { _ = pc.conn.SetDeadline(time.Unix(1, 0)) })
	resp, err := pc.exchange(req)
	if err != nil {
		stop()
		pc.conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	resp.Body = &inlineBody{t: t, pc: pc, body: resp.Body, stop: stop, ctx: ctx, keep: !resp.Close}
	return resp, nil
}

// fits says whether req goes over a connection of ours: a POST whose
// body is small and of known size, or a GET (the SDK's stream) with none.
func (t *inlineTransport) fits(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Close {
		return false
	}
	switch req.Method {
	case http.MethodPost:
		if req.ContentLength <= 0 || req.ContentLength > postBodyLimit {
			return false
		}
	case http.MethodGet:
		if req.ContentLength != 0 || (req.Body != nil && req.Body != http.NoBody) {
			return false
		}
	default:
		return false
	}
	u, err := t.proxy(req)
	return err == nil && u == nil
}

// dialAddr is the address a plain HTTP URL's connection is dialled to.
func dialAddr(u *url.URL) string {
	return net.JoinHostPort(u.Hostname(), cmp.Or(u.Port(), "80"))
}

// get is an idle connection that is still open, or a new one to addr.
func (t *inlineTransport) get(ctx context.Context, addr string) (*inlineConn, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if time.Since(pc.idleAt) < idleConnTimeout && stillOpen(pc.conn) {
			pc.takeReader()
			return pc, nil
		}
		pc.conn.Close()
	}
	conn, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &inlineConn{conn: conn, lim: &headerLimit{r: conn}}
	pc.takeReader()
	return pc, nil
}

func (pc *inlineConn) takeReader() {
	pc.br = connReaders.Get().(*bufio.Reader)
	pc.br.Reset(pc.lim)
}

// put pools pc, or closes it when the pool is full or closed, or when the
// server sent more than the answer (pooled, it would be read as the next
// one's). Only here is the read buffer given back: no one reads pc now.
func (t *inlineTransport) put(pc *inlineConn) {
	if pc.br.Buffered() > 0 {
		pc.conn.Close()
		return
	}
	pc.br.Reset(nil)
	connReaders.Put(pc.br)
	pc.br = nil
	if pc.deadline {
		_ = pc.conn.SetReadDeadline(time.Time{})
		pc.deadline = false
	}
	pc.idleAt = time.Now()
	t.mu.Lock()
	if !t.closed && len(t.idle) < maxIdleConns {
		t.idle = append(t.idle, pc)
		pc = nil
	}
	t.mu.Unlock()
	if pc != nil {
		pc.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections of both transports.
func (t *inlineTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range idle {
		pc.conn.Close()
	}
	t.base.CloseIdleConnections()
}

// shut closes the idle connections and every one in use once its answer
// is read: the link is closing.
func (t *inlineTransport) shut() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.CloseIdleConnections()
}

// exchange writes req and reads the head of its answer, skipping
// informational answers (1xx).
func (pc *inlineConn) exchange(req *http.Request) (*http.Response, error) {
	if err := pc.write(req); err != nil {
		return nil, err
	}
	pc.lim.arm(maxResponseHeaderBytes + connBufferSize)
	defer pc.lim.disarm()
	for {
		resp, err := http.ReadResponse(pc.br, req)
		switch {
		case err != nil:
			return nil, err
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, fmt.Errorf("the server switched protocols on a %s", req.Method)
		case resp.StatusCode < 200:
			resp.Body.Close()
			continue
		}
		return resp, nil
	}
}

// write sends req through a write buffer taken for it alone.
func (pc *inlineConn) write(req *http.Request) error {
	bw := connWriters.Get().(*bufio.Writer)
	bw.Reset(pc.conn)
	defer func() {
		bw.Reset(nil)
		connWriters.Put(bw)
	}()
	if err := req.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// stillOpen says whether an idle connection can carry a request: the
// server has neither closed it nor sent anything on it. It peeks without
// waiting, as net/http's read goroutine would have seen either at once.
func stillOpen(conn net.Conn) bool {
	n, err := peek(conn)
	return n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
}

// arrived says whether the server sent bytes that are not read yet.
func arrived(conn net.Conn) bool {
	n, _ := peek(conn)
	return n > 0
}

// peek looks at the next byte of conn without taking it or waiting for it:
// recvfrom's count and error, or -1 when the socket cannot be asked.
func peek(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, nil
	}
	n, perr := -1, error(nil)
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for the socket to become readable
	})
	if err != nil {
		return -1, nil
	}
	return n, perr
}

// headerLimit bounds what is read from a connection while an answer's
// headers are read.
type headerLimit struct {
	r    io.Reader
	left int
	on   bool
}

func (h *headerLimit) arm(n int) { h.left, h.on = n, true }
func (h *headerLimit) disarm()   { h.on = false }

func (h *headerLimit) Read(p []byte) (int, error) {
	if !h.on {
		return h.r.Read(p)
	}
	if h.left <= 0 {
		return 0, errHeadersTooLarge
	}
	if len(p) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= n
	return n, err
}

// inlineBody is an answer's body: its connection goes back to the pool once
// the body was read to its end, and is closed if the body is closed before.
type inlineBody struct {
	t    *inlineTransport
	pc   *inlineConn
	body io.Reader
	stop func() bool
	ctx  context.Context
	keep bool // the server keeps the connection open

	mu   sync.Mutex // Close may come from another goroutine, to end a Read
	done bool
}

func (b *inlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.finish(true)
	case err != nil:
		b.finish(false)
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

// Close closes the connection unless the body was read to its end. The
// rest of the body is not read: a stream may never end.
func (b *inlineBody) Close() error {
	b.finish(false)
	return nil
}

// settle reads the rest of the body on the caller's goroutine for as long
// as the server has sent it already (the end of an SSE stream usually
// comes right behind its last event), and says whether the body is done
// with: read to its end and its connection pooled, or failed and its
// connection closed. A rest still to come is left to the caller, to read
// in the background. It is for the goroutine that read the body.
func (b *inlineBody) settle(wait time.Duration) bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done {
		return true
	}
	if !b.atHand() {
		return false
	}
	// wait bounds a read that needs more than has arrived: a chunk's
	// header that came in part.
	b.pc.deadline = true
	_ = b.pc.conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, io.LimitReader(atHandReader{b}, drainLimit))
	switch {
	case errors.Is(err, errNotAtHand):
		// The background read waits as long as the drain allows, and
		// ends when the request does.
		b.pc.deadline = false
		_ = b.pc.conn.SetReadDeadline(time.Time{})
		if b.ctx.Err() != nil {
			_ = b.pc.conn.SetReadDeadline(time.Unix(1, 0))
		}
		return false
	case err == nil:
		b.finish(false) // read to its end (pooled already), or past drainLimit: closed
	}
	return true // any other error: Read closed the connection
}

// atHand says whether bytes of the answer wait to be read.
func (b *inlineBody) atHand() bool { return b.pc.br.Buffered() > 0 || arrived(b.pc.conn) }

// atHandReader reads b while bytes wait to be read, and then fails with
// errNotAtHand.
type atHandReader struct{ b *inlineBody }

func (r atHandReader) Read(p []byte) (int, error) {
	if !r.b.atHand() {
		return 0, errNotAtHand
	}
	return r.b.Read(p)
}

var errNotAtHand = errors.New("the rest of the answer has not arrived")

// finish pools the connection if the answer was read whole, the server
// keeps it open and the request's context did not end it; it acts once.
func (b *inlineBody) finish(whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.stop() && whole && b.keep {
		b.t.put(b.pc)
		return
	}
	b.pc.conn.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
