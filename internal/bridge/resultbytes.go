package bridge

import (
	"context"
	"errors"
	"io"
)

// ResultBytes counts the bytes of tool results the manager holds while it
// reads them, so that the gateway can bound them per namespace: a call's
// result is read into memory once (its body), and the body is what is
// counted. See docs/design.md, "Budgets".
type ResultBytes interface {
	// Take counts n more bytes held, or reports false (and counts
	// nothing) when that would pass the budget.
	Take(n int64) bool
	// Return gives back n bytes no longer held.
	Return(n int64)
}

// ErrResultBudget fails a call whose result would pass its ResultBytes
// budget. It is the caller's budget, not the server's failure: the
// connection is left alone.
var ErrResultBudget = errors.New("the budget of result bytes held in memory is spent")

type resultBytesKey struct{}

// WithResultBytes makes CallToolJSON under ctx count the result it reads
// into rb.
func WithResultBytes(ctx context.Context, rb ResultBytes) context.Context {
	return context.WithValue(ctx, resultBytesKey{}, rb)
}

// ResultBytesFrom is the budget WithResultBytes put into ctx, or nil.
func ResultBytesFrom(ctx context.Context) ResultBytes {
	rb, _ := ctx.Value(resultBytesKey{}).(ResultBytes)
	return rb
}

// readBody reads a JSON answer of at most maxMessageBytes, counting it into
// rb (nil: uncounted). A known length is taken at once and read into one
// buffer of that size, so that nothing is allocated beyond the budget;
// otherwise every chunk is taken as it arrives.
func readBody(r io.Reader, size int64, rb ResultBytes) ([]byte, error) {
	if rb != nil && size >= 0 && size <= maxMessageBytes {
		if !rb.Take(size) {
			return nil, ErrResultBudget
		}
		buf := make([]byte, size)
		n, err := io.ReadFull(r, buf)
		return buf[:n], err
	}
	if rb != nil {
		r = &countingReader{r: r, rb: rb}
	}
	return io.ReadAll(io.LimitReader(r, maxMessageBytes+1))
}

// countingReader takes what it reads from rb.
type countingReader struct {
	r  io.Reader
	rb ResultBytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.rb.Take(int64(n)) {
		return 0, ErrResultBudget
	}
	return n, err
}
