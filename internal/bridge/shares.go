package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Shares holds what the servers of each namespace share, for as long as a
// supervisor of the namespace holds it: the pace of what they stream
// besides answers (see othersLinesPerSecond), and the budget of the bytes
// being read from them (readingBudget). Bounds per server alone, a tenant
// would multiply them by its servers. See docs/design.md, "Budgets".
type Shares struct {
	mu   sync.Mutex
	byNS map[string]*share
	// reading is each namespace's budget of bytes being read (tests make
	// it small).
	reading int64
}

// share is what the servers of one namespace share.
type share struct {
	pace    *pace
	reading *readPool
	holders int
}

func newShare(reading int64) *share {
	return &share{pace: newSharedPace(), reading: &readPool{max: reading}}
}

// readingBudget bounds the bytes of the messages being read from the
// servers of a namespace at once, where no caller's budget counts them:
// the events of the SDK's streams until each ends (its GET streams, the
// answers to what it sends itself, and so a tool call's on the SDK's
// path), a JSON answer the SDK reads until it is closed, a stdio server's
// line until it ends, a tools/list page until it is decoded. Each is at
// most a message of the largest size, and without this bound a
// namespace's servers could make the manager hold one per stream at once:
// in a test, 32 calls whose server streamed a 15 MiB notification before
// its answer took the heap to 1.5 GiB. Reading a message costs the SDK
// several times its size (the line, the event's data, the decoded
// message), so the budget is one message of the largest size, and 1 MiB
// besides for the small messages of other streams read meanwhile.
const readingBudget = maxMessageBytes + 1<<20

// errReadingBudget fails a read that would pass a namespace's budget of
// bytes being read (readingBudget).
var errReadingBudget = errors.New("the messages being read from the McpServers of this namespace would pass their budget held at once")

// sizeText is n bytes in MiB, KiB or bytes, the largest unit that counts
// it whole.
func sizeText(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// NewShares returns a Shares that holds nothing yet.
func NewShares() *Shares { return &Shares{byNS: map[string]*share{}, reading: readingBudget} }

// hold returns the share of namespace ns and the func that lets it go; the
// last to let go drops it. A nil Shares gives a share of its own.
func (p *Shares) hold(ns string) (*share, func()) {
	if p == nil {
		return newShare(readingBudget), func() {}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.byNS[ns]
	if h == nil {
		h = newShare(p.reading)
		p.byNS[ns] = h
	}
	h.holders++
	var once sync.Once
	return h, func() { once.Do(func() { p.letGo(ns, h) }) }
}

func (p *Shares) letGo(ns string, h *share) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.holders--; h.holders == 0 && p.byNS[ns] == h {
		delete(p.byNS, ns)
	}
}

// Holders is how many supervisors hold the share of namespace ns.
func (p *Shares) Holders(ns string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.byNS[ns]; h != nil {
		return h.holders
	}
	return 0
}

// readPool is a namespace's budget of bytes being read.
type readPool struct {
	max  int64
	held atomic.Int64
}

// spent is the error of a read the pool refused.
func (p *readPool) spent() error {
	return fmt.Errorf("%w (%s)", errReadingBudget, sizeText(p.max))
}

// lease is one read's share of the pool (registry.ResultBytes): what it
// took comes back with Return, or all at once with close, after which it
// takes nothing (a read may race with its stream's close).
func (p *readPool) lease() *readLease { return &readLease{pool: p} }

type readLease struct {
	pool   *readPool
	mu     sync.Mutex
	n      int64
	closed bool
}

func (l *readLease) Take(n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.pool.held.Add(n) > l.pool.max {
		l.pool.held.Add(-n)
		return false
	}
	l.n += n
	return true
}

func (l *readLease) Return(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, l.n)
	l.n -= n
	l.pool.held.Add(-n)
}

func (l *readLease) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.pool.held.Add(-l.n)
	l.n = 0
}

// eventBytes counts the bytes of the SSE event being read (or of the line,
// for a stdio server's output, where a message is a line) into a lease,
// and gives them back once it ends: an SSE event ends with a blank line.
type eventBytes struct {
	lease *readLease
	lines bool // each line is a message (stdio)
	whole bool // one message until the end (a JSON answer): nothing comes back before close
	event int64
	line  int64 // bytes of the line so far, "\r" not counted
}

// add counts b, read next; it fails once the event would pass the budget.
func (e *eventBytes) add(b []byte) error {
	if e.whole {
		return e.take(len(b))
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i+1]
		}
		if err := e.take(len(seg)); err != nil {
			return err
		}
		e.event += int64(len(seg))
		if i < 0 {
			e.line += int64(len(seg) - bytes.Count(seg, cr))
			return nil
		}
		e.line += int64(i - bytes.Count(seg, cr))
		if e.lines || e.line == 0 {
			e.lease.Return(e.event)
			e.event = 0
		}
		e.line, b = 0, b[i+1:]
	}
	return nil
}

var cr = []byte("\r")

// take counts n bytes more. Refused, the stream fails, and what it held
// goes back at once, whether or not its reader closes it.
func (e *eventBytes) take(n int) error {
	if e.lease.Take(int64(n)) {
		return nil
	}
	e.lease.close()
	return e.lease.pool.spent()
}

// countedBody is an answer the SDK reads, its bytes counted in the
// namespace's budget of bytes being read (readingBudget) until each event
// ends, or (a JSON answer) until it is closed.
type countedBody struct {
	io.ReadCloser
	bytes   eventBytes
	refusal *readRefusal // of the call the body answers, or nil
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if cerr := b.bytes.add(p[:n]); cerr != nil {
		if b.refusal != nil {
			b.refusal.err.Store(&cerr)
		}
		// None of it: a reader (bufio's) hands on the bytes that came with
		// an error before the error, and a refused message would pass whole.
		return 0, cerr
	}
	return n, err
}

// readRefusal is where a read of a call's answer that the budget refused
// is noted: the SDK says only that the request ended without its answer.
type readRefusal struct{ err atomic.Pointer[error] }

type readRefusalKey struct{}

// withReadRefusal marks ctx, a call's, for refusals (readRefusalOf).
func withReadRefusal(ctx context.Context) (context.Context, *readRefusal) {
	r := new(readRefusal)
	return context.WithValue(ctx, readRefusalKey{}, r), r
}

func readRefusalOf(ctx context.Context) *readRefusal {
	r, _ := ctx.Value(readRefusalKey{}).(*readRefusal)
	return r
}

// or is the refusal noted, if any, else err.
func (r *readRefusal) or(err error) error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return err
}
