package bridge

import (
	"bytes"
	"cmp"
	"context"
	"io"

	"golang.org/x/time/rate"
)

// Every SSE stream read from a server is paced by its lines: those the SDK
// reads (its GET stream, the answers to what it sends itself) and those the
// supervisor reads (a tool call's answer, a tools/list page's). Reading a
// line costs the manager far more than writing it costs the server: in a
// test of a notification flood on a GET stream, 31,200 events a second
// took a process 1.7 cores, and one tool call whose server streamed
// notifications before its answer held a core on its own (530,000 a
// second), while a server of no ill will sends a few events a second, of
// two to four lines each. Lines, not events, are counted: a stream of
// comment lines, or of data lines of one event that never ends, costs as
// much per line. Each answer's stream has its own pace, so that the answers
// of many calls in flight are not paced against each other; the SDK's GET
// streams of one link share one, as the server decides when the next one
// opens. Beyond the pace the stream is read later: the server's writes
// wait, nothing is dropped. See docs/design.md, "Budgets".
const (
	linesPerSecond = 400
	linesBurst     = 400
)

// pacedReader is a stream whose lines (ended by "\n", where the SDK's
// scanner and the supervisor's reader split them) are handed on no faster
// than lines allows; it waits after each read for the lines that read
// completed, so that the next read, and the server, wait.
type pacedReader struct {
	r     io.Reader
	ctx   context.Context
	lines *rate.Limiter
}

// paced paces r on its own at linesPerSecond until ctx ends.
func paced(ctx context.Context, r io.Reader) pacedReader {
	return pacedReader{r: r, ctx: ctx, lines: newLinePace()}
}

// newLinePace is the pace of one stream, or of the streams that share it.
func newLinePace() *rate.Limiter { return rate.NewLimiter(linesPerSecond, linesBurst) }

func (p *pacedReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	for k := bytes.Count(b[:n], newline); k > 0; {
		step := min(k, p.lines.Burst())
		if werr := p.lines.WaitN(p.ctx, step); werr != nil {
			return n, cmp.Or(err, p.ctx.Err(), werr)
		}
		k -= step
	}
	return n, err
}

var newline = []byte("\n")

// pacedBody is a response body read through a pacedReader.
type pacedBody struct {
	pacedReader
	io.Closer
}
