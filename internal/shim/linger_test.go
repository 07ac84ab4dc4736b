package shim

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The shim closes a tunnel's connection while the client may still send
// and before the client has read the end of the answer. Closing then must
// not reset the connection: a reset drops what was queued and unsent, the
// trailers that confirm the reap among it.
func TestAConnectionClosedWhileTheClientSendsDeliversAllItQueued(t *testing.T) {
	g := NewWithT(t)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	ln := lingeringListener{raw}
	t.Cleanup(func() { _ = ln.Close() })

	// The client's receive window is tiny, so most of the answer is still
	// queued on the shim's side when it closes.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	client, err := d.Dial("tcp", raw.Addr().String())
	g.Expect(err).NotTo(HaveOccurred())
	defer client.Close()
	// "late" is what the shim never reads: the half-close of stdin after
	// the child is gone.
	_, err = client.Write([]byte("ask late"))
	g.Expect(err).NotTo(HaveOccurred())

	answer := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	closed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			closed <- err
			return
		}
		tc := c.(lingeringConn)
		_ = tc.SetWriteBuffer(1 << 20)
		if _, err := io.ReadFull(c, make([]byte, len("ask"))); err != nil {
			closed <- err
			return
		}
		// Queued whole: the write buffer holds it although the client
		// takes little at a time.
		_ = c.SetWriteDeadline(time.Now().Add(eventually))
		if _, err := c.Write(answer); err != nil {
			closed <- err
			return
		}
		closed <- c.Close()
	}()
	// The client reads only once the shim's Close has returned (after its
	// linger, as this client does not close first).
	g.Eventually(closed).WithTimeout(eventually).Should(Receive(Succeed()))
	got, err := io.ReadAll(client)
	g.Expect(err).NotTo(HaveOccurred(), "read %d of %d bytes", len(got), len(answer))
	g.Expect(got).To(Equal(answer))
}
