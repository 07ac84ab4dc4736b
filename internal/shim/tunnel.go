package shim

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// serveTunnel runs one tunnel: a fresh child whose stdin is the request
// body and whose stdout is the response body, ended by trailers written
// after the child and its process group have been reaped.
func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// Read the body while the response is written. Without this the HTTP/1
	// server drains an unread request body before it writes a response,
	// which, for a stdin that stays open, is never.
	_ = rc.EnableFullDuplex()
	// One tunnel per connection: no keep-alive to get out of step with.
	w.Header().Set("Connection", "close")
	if !s.authorized(r) {
		s.logRefusal(r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-bridge-shim"`)
		refuse(w, rc, http.StatusUnauthorized, "wrong or missing token")
		return
	}
	sl, err := s.acquire(r.Context())
	if err != nil {
		refuse(w, rc, http.StatusServiceUnavailable, err.Error())
		return
	}
	c, err := s.start(sl)
	if err != nil {
		s.release(sl)
		if errors.Is(err, errStopping) || errors.Is(err, errPreempted) {
			refuse(w, rc, http.StatusServiceUnavailable, err.Error())
			return
		}
		msg := startMessage(s.argv[0], err)
		s.log.Error("cannot start the server process", "error", msg)
		w.Header().Set(tunnel.HeaderError, tunnel.ErrorStart)
		refuse(w, rc, http.StatusInternalServerError, msg)
		return
	}
	go func() {
		<-c.reaped
		s.release(sl)
	}()
	began := time.Now()
	s.log.Info("tunnel opened", "pid", c.pid, "remote", r.RemoteAddr)
	relay(w, r, rc, c)
	s.log.Info("tunnel closed", "pid", c.pid, "exit", c.exitString(), "reason", string(c.reason),
		"duration", time.Since(began).Round(time.Millisecond).String())
}

// refuse answers an error without waiting for the request body.
func refuse(w http.ResponseWriter, rc *http.ResponseController, code int, msg string) {
	_ = rc.SetReadDeadline(time.Now())
	http.Error(w, msg, code)
}

// relay pumps both directions until the child has been reaped, then ends
// the response with the trailers that confirm it.
func relay(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, c *child) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Trailer", tunnel.TrailerExit+", "+tunnel.TrailerReason)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		c.end(tunnel.EndClientGone)
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		c.feed(r.Body)
	}()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		c.copyStdout(w, rc)
	}()

	<-c.reaped
	// The group is gone: what it wrote is in the pipe, unless a descendant
	// that escaped the group still holds it. Bound the rest.
	_ = c.stdout.SetReadDeadline(time.Now().Add(stdoutDrain))
	_ = rc.SetWriteDeadline(time.Now().Add(responseFinish))
	<-copied
	_ = rc.SetReadDeadline(time.Now()) // ends feed's read of a stdin still open
	<-fed
	closeAll(c.stdout)
	h.Set(tunnel.TrailerExit, tunnel.EncodeExit(c.ws))
	h.Set(tunnel.TrailerReason, string(c.reason))
}

// feed copies the request body to the child's stdin. The body's end is the
// client closing stdin; a read error is the client going away. Once the
// child's stdin is gone the rest of the body is read and dropped, so that
// the client never blocks on a dead child.
func (c *child) feed(body io.Reader) {
	buf := make([]byte, 32<<10)
	writable := true
	for {
		n, err := body.Read(buf)
		if n > 0 && writable {
			if _, werr := c.stdin.Write(buf[:n]); werr != nil {
				writable = false
				if !errors.Is(werr, os.ErrClosed) { // EPIPE: the child closed it
					c.pipeClosed()
				}
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			c.end(tunnel.EndStdinClosed)
			return
		case err != nil:
			c.end(tunnel.EndClientGone)
			return
		}
	}
}

// copyStdout copies the child's stdout to the response, flushing every
// read so that a message is never held back. If the client does not take
// it, the rest is read and dropped: a child blocked on a full pipe could
// not act on SIGTERM.
func (c *child) copyStdout(w io.Writer, rc *http.ResponseController) {
	buf := make([]byte, 32<<10)
	writable := true
	for {
		n, err := c.stdout.Read(buf)
		if n > 0 && writable {
			_, werr := w.Write(buf[:n])
			if werr == nil {
				werr = rc.Flush()
			}
			if werr != nil {
				writable = false
				c.end(tunnel.EndClientGone)
			}
		}
		if errors.Is(err, io.EOF) {
			c.pipeClosed()
		}
		if err != nil {
			return
		}
	}
}

// refusalLogInterval bounds how often refused tunnels are logged: anyone
// who can reach the Pod can send them, and the log is the server's too.
const refusalLogInterval = time.Second

// logRefusal logs a refused tunnel, at most once per refusalLogInterval,
// with the number of refusals not logged since the last line.
func (s *Server) logRefusal(remote string) {
	s.refusals.mu.Lock()
	defer s.refusals.mu.Unlock()
	now := time.Now()
	if now.Sub(s.refusals.last) < refusalLogInterval {
		s.refusals.unlogged++
		return
	}
	s.log.Warn("tunnel refused: wrong or missing token", "remote", remote, "alsoRefusedSinceLastLine", s.refusals.unlogged)
	s.refusals.last, s.refusals.unlogged = now, 0
}
