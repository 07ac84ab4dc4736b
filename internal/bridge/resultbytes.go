package bridge

import (
	"io"

	"github.com/mcpbridge/operator/internal/registry"
)

// readBody reads a JSON answer of at most maxMessageBytes, counting it into
// rb (nil: uncounted). A known length is taken at once and read into one
// buffer of that size, so that nothing is allocated beyond the budget;
// otherwise every chunk is taken as it arrives.
func readBody(r io.Reader, size int64, rb registry.ResultBytes) ([]byte, error) {
	if rb != nil && size >= 0 && size <= maxMessageBytes {
		if !rb.Take(size) {
			return nil, registry.ErrResultBudget
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
	rb registry.ResultBytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.rb.Take(int64(n)) {
		return 0, registry.ErrResultBudget
	}
	return n, err
}
