package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// conns are the gateway server's connections, which a draining gateway
// closes itself rather than through http.Server.Shutdown: Shutdown drops a
// request that reaches an accepted connection after it began, unanswered,
// and the agent's HTTP client does not send a POST again. See
// drainingServer and docs/design.md, "Replicas and ownership" (shutdown).
type conns struct {
	mu      sync.Mutex
	state   map[net.Conn]http.ConnState
	streams map[net.Conn]int // GET requests in progress on each
}

type connKey struct{}

// withConn is the server's ConnContext: each request knows its connection.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// track is the server's ConnState hook.
func (cs *conns) track(c net.Conn, s http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(cs.state, c)
		return
	}
	if cs.state == nil {
		cs.state = map[net.Conn]http.ConnState{}
	}
	cs.state[c] = s
}

// hold notes r's connection as a GET stream's until the returned func runs.
func (cs *conns) hold(r *http.Request) func() {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return func() {} // not served by httpServer
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.streams == nil {
		cs.streams = map[net.Conn]int{}
	}
	cs.streams[c]++
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.streams[c]--; cs.streams[c] <= 0 {
			delete(cs.streams, c)
		}
	}
}

// closeIdle closes the connections that wait for a next request, and with
// streams those of the GET streams too; it reports how many connections
// are left.
func (cs *conns) closeIdle(streams bool) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	left := len(cs.state)
	for c, s := range cs.state {
		if s == http.StateIdle || streams && cs.streams[c] > 0 {
			_ = c.Close()
			left--
		}
	}
	return left
}
