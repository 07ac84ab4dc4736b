package shim

import (
	"io"
	"net"
	"time"
)

// Bounds on the lingering close of a connection (see lingeringConn).
const (
	// closeLinger bounds waiting for the client's close: a client that
	// has the whole answer closes at once.
	closeLinger = time.Second
	// closeDrainBytes bounds what is read and dropped meanwhile.
	closeDrainBytes = 1 << 20
)

// lingeringListener hands out connections that close the way RFC 9112
// (section 9.6) asks of a server. Every tunnel ends by the shim closing
// its connection, often while the client still sends: the half-close of
// stdin, or stdin written just before the child exited. A socket closed
// with bytes it never read is reset, and a reset throws away what the
// shim had queued but not yet sent, the end of stdout and the trailers
// that confirm the reap among it: the client would see the tunnel end
// unconfirmed. See docs/design.md, "The shim and the tunnel".
type lingeringListener struct{ net.Listener }

func (l lingeringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return lingeringConn{tc}, nil
	}
	return c, nil
}

// lingeringConn's Close sends everything queued and a FIN, reads and
// drops what the client still sends until it closes too (bounded in time
// and bytes), and only then closes the socket.
type lingeringConn struct{ *net.TCPConn }

func (c lingeringConn) Close() error {
	if c.CloseWrite() == nil && c.SetReadDeadline(time.Now().Add(closeLinger)) == nil {
		_, _ = io.CopyN(io.Discard, c.TCPConn, closeDrainBytes)
	}
	return c.TCPConn.Close()
}
