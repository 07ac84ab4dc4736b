package gateway

import (
	"net"
	"sync"
)

// ListenWhenServing is a TCP listener for addr that binds on its first
// Accept, that is when the gateway starts serving: only on the elected
// leader. A replica that is not the leader then refuses connections, as it
// did when the server bound its own address, instead of accepting
// connections it would never answer. A bind error (the port is taken) is
// returned by that Accept, and so ends the gateway's server.
func ListenWhenServing(addr string) net.Listener { return &deferredListener{addr: addr} }

type deferredListener struct {
	addr string

	mu     sync.Mutex
	ln     net.Listener
	closed bool
}

func (l *deferredListener) bound() (net.Listener, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, net.ErrClosed
	}
	if l.ln == nil {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return nil, err
		}
		l.ln = ln
	}
	return l.ln, nil
}

func (l *deferredListener) Accept() (net.Conn, error) {
	ln, err := l.bound()
	if err != nil {
		return nil, err
	}
	return ln.Accept()
}

func (l *deferredListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.ln == nil {
		return nil
	}
	return l.ln.Close()
}

// Addr is the bound address once bound, the configured one before.
func (l *deferredListener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return l.ln.Addr()
	}
	return configuredAddr(l.addr)
}

type configuredAddr string

func (a configuredAddr) Network() string { return "tcp" }
func (a configuredAddr) String() string  { return string(a) }
