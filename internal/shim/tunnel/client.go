package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Credentials authenticate one tunnel both ways: the token the shim
// checks, and the shim's certificate the client pins.
type Credentials struct {
	// Token is sent only once the shim has shown Cert.
	Token string
	// Cert is the shim's certificate, PEM: the only one the client accepts.
	Cert []byte
}

// newTransport is the client's HTTP/1.1 transport for one tunnel: TLS
// pinned to the shim's certificate, one connection (keep-alives off, so an
// ended tunnel leaves nothing behind and never waits for its request body
// before it reports the end), no proxy from the environment (Pod IPs are
// dialled directly), TCP keep-alive probes to notice a peer that vanished.
func newTransport(pinned []byte) (*http.Transport, error) {
	tc, err := clientTLS(pinned)
	if err != nil {
		return nil, err
	}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}, nil
}

// Tunnel is the client side of one tunnel: the byte streams of one fresh
// server process in the shim's Pod. For an MCP session:
//
//	&mcp.IOTransport{Reader: t.Stdout(), Writer: t.Stdin()}
type Tunnel struct {
	stdinR  *io.PipeReader // the request body
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter // fed from the response body by pump
	abort   context.CancelFunc
	done    chan struct{}
	err     error // set before done is closed
}

// Dial opens a tunnel to the shim at addr ("host:port") over TLS pinned to
// c.Cert: the shim starts a fresh child for it, after the previous
// tunnel's child has been reaped (that tunnel is pre-empted). ctx bounds
// only the opening; the tunnel lives until it ends or Close. Errors:
// ErrUnauthorized, *StartError (the command could not be started),
// ErrPinMismatch (wrapped), or the connection's or the shim's error.
func Dial(ctx context.Context, addr string, c Credentials) (*Tunnel, error) {
	transport, err := newTransport(c.Cert)
	if err != nil {
		return nil, fmt.Errorf("tunnel to %s: %w", addr, err)
	}
	t := &Tunnel{done: make(chan struct{})}
	t.stdinR, t.stdinW = io.Pipe()
	t.stdoutR, t.stdoutW = io.Pipe()
	reqCtx, abort := context.WithCancel(context.Background())
	t.abort = abort
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, "https://"+addr+TunnelPath, t.stdinR)
	if err != nil {
		abort()
		return nil, fmt.Errorf("tunnel to %s: %w", addr, err)
	}
	// Unknown length: stream it chunked, at once. A zero length would make
	// the transport wait for the first stdin bytes before it sends anything.
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/octet-stream")

	// On ctx's end, abort; and end the request body too: the transport
	// waits for its writer, which reads stdin, before RoundTrip returns.
	stop := context.AfterFunc(ctx, func() {
		abort()
		_ = t.stdinW.CloseWithError(context.Cause(ctx))
	})
	resp, err := transport.RoundTrip(req)
	if !stop() { // ctx ended: the request was aborted, or is about to be
		err = errors.Join(context.Cause(ctx), err)
		if resp != nil {
			_ = resp.Body.Close()
		}
		resp = nil
	}
	if resp == nil {
		t.fail()
		return nil, fmt.Errorf("tunnel to the shim at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := answerError(resp)
		t.fail()
		return nil, err
	}
	go t.pump(resp)
	return t, nil
}

// fail releases a tunnel that never opened.
func (t *Tunnel) fail() {
	t.abort()
	_ = t.stdinW.Close()
	_ = t.stdoutR.Close()
}

// answerError turns a refusal into an error, with the shim's explanation.
func answerError(resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	msg := strings.TrimSpace(string(b))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return ErrUnauthorized
	case resp.Header.Get(HeaderError) == ErrorStart:
		return &StartError{Message: msg}
	}
	return fmt.Errorf("the shim refused the tunnel: %s: %s", resp.Status, msg)
}

// pump copies the response body to Stdout. Once the reader has closed
// Stdout it reads on and drops the rest: the trailers at the end are the
// confirmation Done waits for.
func (t *Tunnel) pump(resp *http.Response) {
	defer t.abort()
	buf := make([]byte, 32<<10)
	writable := true
	var rerr error
	for rerr == nil {
		var n int
		n, rerr = resp.Body.Read(buf)
		if n > 0 && writable {
			if _, err := t.stdoutW.Write(buf[:n]); err != nil {
				writable = false
			}
		}
	}
	_ = resp.Body.Close()
	t.err = endError(rerr, resp.Trailer)
	// Writes to stdin fail from now on; the child is gone or abandoned.
	_ = t.stdinR.CloseWithError(errEnded)
	close(t.done)
	// Readers see the end only after Done, so that Err is set by then.
	var ue *unconfirmedError
	if errors.As(t.err, &ue) {
		_ = t.stdoutW.CloseWithError(t.err)
	} else {
		_ = t.stdoutW.Close()
	}
}

// errEnded: stdin written after the tunnel ended.
var errEnded = errors.New("the tunnel has ended")

// endError reads how the tunnel ended from the end of its response.
func endError(readErr error, trailer http.Header) error {
	if !errors.Is(readErr, io.EOF) {
		return &unconfirmedError{cause: readErr}
	}
	exit := trailer.Get(TrailerExit)
	if exit == "" {
		return &unconfirmedError{cause: errors.New("the response ended without the shim's exit trailer")}
	}
	e, err := decodeExit(exit, trailer.Get(TrailerReason))
	if err != nil {
		return &unconfirmedError{cause: err}
	}
	return e
}

// unconfirmedError is ErrUnconfirmed with what broke.
type unconfirmedError struct{ cause error }

func (e *unconfirmedError) Error() string { return ErrUnconfirmed.Error() + ": " + e.cause.Error() }
func (e *unconfirmedError) Unwrap() []error {
	return []error{ErrUnconfirmed, e.cause}
}

// Stdin is the child's stdin. Close is a half-close: the child reads EOF,
// and the shim ends the child (SIGTERM after its grace, SIGKILL after
// another) unless it exits by itself. Writes after the end fail.
func (t *Tunnel) Stdin() io.WriteCloser { return t.stdinW }

// Stdout is the child's stdout, unchanged. It ends (EOF, or an error
// wrapping ErrUnconfirmed) only after Done is closed. Close stops reading;
// the tunnel goes on to its end.
func (t *Tunnel) Stdout() io.ReadCloser { return t.stdoutR }

// Done is closed when the tunnel has ended: the shim confirmed the child's
// reap, or the connection broke, or Close aborted it.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// Err says how the tunnel ended, once Done is closed (nil before): an
// *ExitError (confirmed: the child and its group are gone) or an error
// wrapping ErrUnconfirmed (the child may still be running).
func (t *Tunnel) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Close aborts the tunnel at once, without waiting for the shim's
// confirmation: the shim sees its client go away and ends the child
// itself. Done is closed shortly after. To close a tunnel gracefully,
// close Stdin and wait for Done instead.
func (t *Tunnel) Close() {
	t.abort()
	_ = t.stdinW.CloseWithError(errEnded)
	_ = t.stdoutR.Close()
}
