package bridge

import (
	"bytes"
	"cmp"
	"context"
	"io"

	"golang.org/x/time/rate"
)

// The SSE events the SDK reads from a server (its GET stream, and the
// answers to what the SDK sends itself) are paced per connection: the SDK
// decodes every event, and a server may stream them as fast as loopback
// carries them (in a test of a notification flood, 31,200 a second took a
// process 1.7 cores, the flooding server's side included), where a
// well-behaved one sends a few list_changed a second. Beyond the pace the stream is read
// later: the server's writes wait, nothing is dropped. The supervisor's own
// reads (tool calls, tools/list pages) are not paced; see docs/design.md,
// "Budgets".
const (
	sdkEventsPerSecond = 100
	sdkEventsBurst     = 100
)

// pacedBody is an SSE body whose events (counted as the blank lines that
// end them, as the SDK's scanner splits lines: "\n", or "\r\n") are handed
// on no faster than events allows; it waits after each read for the
// events that read completed, so that the next read, and the server, wait.
type pacedBody struct {
	io.ReadCloser
	ctx    context.Context
	events *rate.Limiter
	line   lineState
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for k := b.line.blankLines(p[:n]); k > 0; {
		step := min(k, b.events.Burst())
		if werr := b.events.WaitN(b.ctx, step); werr != nil {
			return n, cmp.Or(err, b.ctx.Err(), werr)
		}
		k -= step
	}
	return n, err
}

// lineState is what a stream's current line held so far: up to two bytes
// are told apart (none, "\r", anything else).
type lineState struct {
	seen int  // bytes of the current line, counted up to 2
	cr   bool // the current line so far is "\r"
}

// blankLines counts the lines of p, read after what ls saw, that end
// empty ("\n" alone, or "\r\n"), and moves ls to the end of p.
func (ls *lineState) blankLines(p []byte) int {
	n := 0
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			ls.add(p)
			return n
		}
		ls.add(p[:i])
		if ls.seen == 0 || ls.seen == 1 && ls.cr {
			n++
		}
		ls.seen, ls.cr, p = 0, false, p[i+1:]
	}
	return n
}

func (ls *lineState) add(p []byte) {
	switch {
	case len(p) == 0 || ls.seen >= 2:
	case ls.seen == 0 && len(p) == 1:
		ls.seen, ls.cr = 1, p[0] == '\r'
	default:
		ls.seen, ls.cr = 2, false
	}
}
