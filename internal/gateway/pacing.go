package gateway

import (
	"cmp"
	"crypto/tls"
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
	closed    chan struct{}
	closeOnce sync.Once
}

// pause puts off the connection's reads for d from now.
func (c *pacedConn) pause(d time.Duration) {
	c.notBefore.Store(time.Now().Add(d).UnixNano())
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
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, _ := c.(*pacedConn)
	return pc
}

// paceRefused puts off the next read of r's connection when r was refused.
func (g *Gateway) paceRefused(r *http.Request, aw *answerWriter) {
	switch aw.status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
	default:
		if !aw.refused {
			return
		}
	}
	if pc := pacedConnOf(r); pc != nil {
		pc.pause(pauseAfter(cmp.Or(g.RefusalPause, DefaultRefusalPause), r.ContentLength))
	}
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
