package gateway

import (
	"cmp"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Pacing of refused callers. A refusal is answered at once, but an agent
// that ignores it and asks again at once keeps the gateway's cores busy
// with refusals: reading, checking and answering them, thousands a second,
// while every other tenant's requests wait behind them in the scheduler.
// So the connection a refusal was answered on is read again only after
// RefusalPause: the caller has its answer without delay, and its next
// request on that connection waits in the socket, costing no CPU. Other
// connections are not touched. See docs/design.md, "Budgets".

// DefaultRefusalPause is how long a connection waits to be read again
// after a refusal (401, 403, 429, or a tools/call a budget refused).
const DefaultRefusalPause = 100 * time.Millisecond

// pacedListener hands out pacedConns.
type pacedListener struct{ net.Listener }

func (l pacedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pacedConn{Conn: c, closed: make(chan struct{})}, nil
}

// pacedConn is a connection whose reads can be put off (pause).
type pacedConn struct {
	net.Conn
	notBefore atomic.Int64 // unix nanoseconds; no read starts before
	pending   atomic.Int64 // the pause to start once the answer is done
	closed    chan struct{}
	closeOnce sync.Once
}

// pause puts off the connection's reads for d once the answer now being
// written is done (idle): until then net/http may still read what is
// left of the request's body (up to 256 KiB) before it sends the answer,
// which must not wait.
func (c *pacedConn) pause(d time.Duration) {
	c.pending.Store(int64(d))
}

// idle starts the pending pause, if any: the server's answer is done and
// the next read is the next request's.
func (c *pacedConn) idle() {
	if d := c.pending.Swap(0); d > 0 {
		c.notBefore.Store(time.Now().Add(time.Duration(d)).UnixNano())
	}
}

func (c *pacedConn) Read(p []byte) (int, error) {
	if nb := c.notBefore.Load(); nb != 0 && !c.wait(time.Until(time.Unix(0, nb))) {
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

// wait waits d; false when the connection was closed meanwhile.
func (c *pacedConn) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closed:
		return false
	}
}

// Close also ends a read that waits.
func (c *pacedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// CloseWrite keeps the TCP half-close net/http uses before closing.
func (c *pacedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// pacedConnOf is the pacedConn r came in on, or nil when it was not served
// by Server.
func pacedConnOf(r *http.Request) *pacedConn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return asPaced(c)
}

// asPaced is c as the pacedConn under it, or nil.
func asPaced(c net.Conn) *pacedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, _ := c.(*pacedConn)
	return pc
}

// connState is the server's ConnState hook: it tracks the connections
// (conns.go) and starts a refused request's pause once it is answered.
func (g *Gateway) connState(c net.Conn, s http.ConnState) {
	g.conns.track(c, s)
	if pc := asPaced(c); s == http.StateIdle && pc != nil {
		pc.idle()
	}
}

// paceRefused puts off the next read of r's connection when r was refused.
func (g *Gateway) paceRefused(r *http.Request, aw *answerWriter) {
	if !aw.isRefusal() {
		return
	}
	if pc := pacedConnOf(r); pc != nil {
		pc.pause(pauseAfter(cmp.Or(g.RefusalPause, DefaultRefusalPause), max(r.ContentLength, aw.bodyRead)))
	}
}

// isRefusal: the request was refused (401, 403, 413, 429, or a tools/call
// a budget refused).
func (w *answerWriter) isRefusal() bool {
	switch w.status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return true
	}
	return w.refused
}

// A large body refused once read has cost the replica its read and its
// check, milliseconds of a core for 4 MiB, and an agent that opens a new
// connection for each request is not slowed by its connection's pause:
// eight such agents, each refused, took another tenant's p99 to 14.82
// times its unloaded p99. A large body the SDK serves costs more: go-sdk
// decodes a message several times, each after a depth check byte by byte,
// about 70 ms of a core here for 4 MiB, and eight agents listing tools
// with a 4 MiB string in _meta, all served, took it to 41.50 times. A
// large tools/call on the fast path is read and checked once, and is what
// agents send on purpose. So a body over pacedBodyBytes refused once read,
// or left to the SDK, puts off the namespace's large bodies, on any
// connection: a body over pacedBodyBytes (or of unknown length) is
// refused before a byte of it is read until the pause those bytes earned
// has passed, the pauses of bodies that come together adding up. And the
// SDK decodes one such body of a namespace at a time: bodies that came
// together are refused once read, before they are decoded. Smaller
// requests are served meanwhile. See docs/design.md, "Budgets".

// pacedBodyBytes is the size over which a body is paced by its namespace.
const pacedBodyBytes = 64 << 10

// bodyPacer paces one namespace's large bodies.
type bodyPacer struct {
	pause    time.Duration // the Gateway's RefusalPause
	until    atomic.Int64  // unix nanoseconds; no large body is read before
	decoding atomic.Bool   // the SDK is serving one
}

// decode reports whether the SDK may decode a large body now; done is
// to be called once it has served it.
func (p *bodyPacer) decode() bool { return p.decoding.CompareAndSwap(false, true) }

func (p *bodyPacer) done() { p.decoding.Store(false) }

// spent notes that a body of n bytes was read and refused, or read and
// left to the SDK.
func (p *bodyPacer) spent(n int64) {
	if n <= pacedBodyBytes {
		return
	}
	d := int64(pauseAfter(p.pause, n))
	for {
		old := p.until.Load()
		if p.until.CompareAndSwap(old, max(old, time.Now().UnixNano())+d) {
			return
		}
	}
}

// wait is how long a body of n bytes (-1: unknown) must wait to be read:
// 0 when it may be read now.
func (p *bodyPacer) wait(n int64) time.Duration {
	if n >= 0 && n <= pacedBodyBytes {
		return 0
	}
	until := p.until.Load()
	if until == 0 {
		return 0
	}
	return max(time.Until(time.Unix(0, until)), 0)
}

// countedBody counts the bytes read of a request's body.
type countedBody struct {
	io.ReadCloser
	n int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// refusedBytesPerSecond paces the bodies of refused requests: reading and
// checking a body of megabytes costs the replica milliseconds of a core
// before it can be refused (docs/design.md, "Budgets"), so after a refused
// request of n bytes its connection waits at least n / refusedBytesPerSecond
// (a second for a body of 4 MiB, the limit) to be read again.
const refusedBytesPerSecond = 4 << 20

// pauseAfter is how long a connection waits after a refusal of a request
// whose body is n bytes (-1 when unknown): pause, or longer for a large
// body.
func pauseAfter(pause time.Duration, n int64) time.Duration {
	n = min(max(n, 0), 1<<32) // refused over the body limit long before
	return max(pause, time.Duration(n)*time.Second/refusedBytesPerSecond)
}

// Server is the gateway's HTTP server and the listener it serves on, ln
// with the connections paced (and TLS with g.TLS set); AddToManager serves
// them, and a program that runs a gateway outside a manager (the benches)
// serves them the same way.
func (g *Gateway) Server(ln net.Listener) (*http.Server, net.Listener) {
	ln = pacedListener{ln}
	if g.TLS != nil {
		ln = tls.NewListener(ln, g.TLS)
	}
	return g.httpServer(), ln
}
