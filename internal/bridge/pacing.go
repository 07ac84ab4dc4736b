package bridge

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// Every SSE stream read from a server is paced, by its lines and by its
// bytes: those the SDK reads (its GET stream, the answers to what it sends
// itself) and those the supervisor reads (a tool call's answer, a
// tools/list page's). Reading costs the manager far more than writing
// costs the server: in a test of a notification flood on a GET stream,
// 31,200 events a second took a process 1.7 cores, and events of 1 MiB,
// 83 a second, 1.55 cores (the SDK decodes each); one tool call whose
// server streamed notifications before its answer held a core on its own
// (530,000 a second). A server of no ill will sends a few events a second,
// of two to four lines each. Lines, not events, are counted: a stream of
// comment lines, or of data lines of one event that never ends, costs as
// much per line. A stream's bytes pass at once up to one message of the
// largest size (an answer is one message), and then at bytesPerSecond, a
// few KiB of notifications a second being what such a server sends: the
// SDK took 80 ms of CPU for each MiB of them.
//
// Each answer's stream has its own pace, so that the answers of many calls
// in flight are not paced against each other; the SDK's GET streams of one
// link share one, as the server decides when the next one opens. Beyond
// the pace the stream is read later: the server's writes wait, nothing is
// dropped. See docs/design.md, "Budgets".
const (
	linesPerSecond = 400
	linesBurst     = 400
	bytesPerSecond = 64 << 10
	bytesBurst     = maxMessageBytes
)

// The servers of a namespace share one more pace (Shares), which neither
// many calls in flight nor many servers multiply: the events of the
// answer streams the supervisor reads that are not the answers
// (otherEvents) wait for its lines and bytes, and every other line read
// from a server (the SDK's streams, a stdio server's lines beyond its
// credit) for its lines too, besides its stream's own pace. It allows more
// than a stream's own pace, since every call's progress and log
// notifications take from it, and a burst of a few MiB of bytes rather
// than a message of the largest size. The bytes of the SDK's streams and
// of stdio lines are not taken from it: an answer they carry passes at
// once, up to a message of the largest size.
const (
	othersLinesPerSecond = 2000
	othersLinesBurst     = 2000
	othersBytesPerSecond = 256 << 10
	othersBytesBurst     = 4 << 20
)

// pace is what a stream, or the streams that share it, may read.
type pace struct{ lines, bytes *rate.Limiter }

func newPace() *pace {
	return &pace{lines: rate.NewLimiter(linesPerSecond, linesBurst), bytes: rate.NewLimiter(bytesPerSecond, bytesBurst)}
}

func newSharedPace() *pace {
	return &pace{lines: rate.NewLimiter(othersLinesPerSecond, othersLinesBurst),
		bytes: rate.NewLimiter(othersBytesPerSecond, othersBytesBurst)}
}

// pacedReader is a stream whose lines (ended by "\n", where the SDK's
// scanner and the supervisor's reader split them) and bytes are handed on
// no faster than its pace allows; it waits after each read for what that
// read brought, so that the next read, and the server, wait.
type pacedReader struct {
	r    io.Reader
	ctx  context.Context
	pace *pace
	// shared, if set, is also waited for, by lines only: the namespace's
	// (Shares).
	shared *pace
}

// paced paces r on its own until ctx ends.
func paced(ctx context.Context, r io.Reader) pacedReader {
	return pacedReader{r: r, ctx: ctx, pace: newPace()}
}

func (p *pacedReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if werr := waitBoth(p.ctx, p.pace, p.shared, bytes.Count(b[:n], newline), n); werr != nil {
		return n, cmp.Or(err, werr)
	}
	return n, err
}

// waitBoth waits for own to allow lines and size bytes, then for shared,
// if set, to allow the lines.
func waitBoth(ctx context.Context, own, shared *pace, lines, size int) error {
	if err := own.wait(ctx, lines, size); err != nil || shared == nil {
		return err
	}
	return waitPace(ctx, shared.lines, lines)
}

// wait waits until the pace allows lines and size bytes, or ctx ends.
func (p *pace) wait(ctx context.Context, lines, size int) error {
	if err := waitPace(ctx, p.lines, lines); err != nil {
		return err
	}
	return waitPace(ctx, p.bytes, size)
}

// waitPace waits until lim allows n, a burst at a time, or ctx ends.
func waitPace(ctx context.Context, lim *rate.Limiter, n int) error {
	if lim.Limit() == rate.Inf {
		return nil
	}
	for n > 0 {
		step := min(n, lim.Burst())
		if err := lim.WaitN(ctx, step); err != nil {
			return cmp.Or(ctx.Err(), err)
		}
		n -= step
	}
	return nil
}

var newline = []byte("\n")

// pacedBody is a response body read through a pacedReader.
type pacedBody struct {
	pacedReader
	io.Closer
}

// A stdio server's stdout is paced as an SSE stream is, by lines and
// bytes, except that each line the manager writes to its stdin (a request,
// a notification, an answer to the server's own request) lets one line
// back unpaced: a stdio server answers on the same stream it notifies on,
// so its answers pass at the rate it is asked, and the rest (notifications,
// requests of its own) at the pace. In a test, a stdio server that wrote
// notifications without pause took the manager's process 1.7 cores.
// See docs/design.md, "Budgets".

// pacedStdio wraps a stdio server's stdout and stdin. With the namespace's
// share, the lines beyond the credit also wait for its pace (lines only),
// and each line counts against its budget of bytes being read until it
// ends. Closing the stdout it returns ends a wait for the pace.
func pacedStdio(stdout io.ReadCloser, stdin io.WriteCloser, sh *share) (io.ReadCloser, io.WriteCloser) {
	ctx, cancel := context.WithCancel(context.Background())
	credit := new(atomic.Int64)
	r := &pacedLines{ReadCloser: stdout, ctx: ctx, cancel: cancel, credit: credit, pace: newPace()}
	if sh != nil {
		r.shared, r.reading = sh.pace, eventBytes{lease: sh.reading.lease(), lines: true}
	}
	return r, creditingWriter{WriteCloser: stdin, credit: credit}
}

// maxStdioCredit bounds the lines a stdio server may send back unpaced:
// a server that leaves requests unanswered (or is sent notifications,
// which it does not answer) would otherwise save their credits up for a
// flood. It is 64 times a namespace's default budget of calls in flight,
// so that answers do not wait unless one server is sent more at once.
const maxStdioCredit = 16384

// creditingWriter counts the lines written to a stdio server, up to
// maxStdioCredit not yet taken.
type creditingWriter struct {
	io.WriteCloser
	credit *atomic.Int64
}

func (w creditingWriter) Write(b []byte) (int, error) {
	n, err := w.WriteCloser.Write(b)
	addCapped(w.credit, int64(bytes.Count(b[:n], newline)), maxStdioCredit)
	return n, err
}

// addCapped adds d to c, which stays at most limit.
func addCapped(c *atomic.Int64, d, limit int64) {
	for d > 0 {
		v := c.Load()
		if c.CompareAndSwap(v, min(v+d, limit)) {
			return
		}
	}
}

// pacedLines is a stdio server's stdout: a line read takes one of the
// lines written, or else its place at the pace (and its bytes).
type pacedLines struct {
	io.ReadCloser
	ctx     context.Context
	cancel  context.CancelFunc
	credit  *atomic.Int64
	pace    *pace
	shared  *pace      // or nil; see pacedStdio
	reading eventBytes // its lease is nil without a share
	line    int        // bytes of the line being read, so far
}

func (r *pacedLines) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	if r.reading.lease != nil {
		if cerr := r.reading.add(b[:n]); cerr != nil {
			return 0, cerr // none of it: bytes handed on with an error are read all the same
		}
	}
	lines, size := 0, 0
	for p := b[:n]; len(p) > 0; {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			r.line += len(p)
			break
		}
		if !takeOne(r.credit) {
			lines, size = lines+1, size+r.line+i+1
		}
		r.line, p = 0, p[i+1:]
	}
	if werr := waitBoth(r.ctx, r.pace, r.shared, lines, size); werr != nil {
		return n, cmp.Or(err, werr)
	}
	return n, err
}

func (r *pacedLines) Close() error {
	r.cancel()
	if r.reading.lease != nil {
		r.reading.lease.close()
	}
	return r.ReadCloser.Close()
}

// takeOne takes one from c if it is above zero.
func takeOne(c *atomic.Int64) bool {
	for {
		v := c.Load()
		if v <= 0 {
			return false
		}
		if c.CompareAndSwap(v, v-1) {
			return true
		}
	}
}
