package bridge

import (
	"io"
	"sync"

	"github.com/mcpbridge/operator/internal/registry"
)

// readBody reads a JSON answer of at most maxMessageBytes (a longer one is
// errTooLarge), counting it into rb (nil: uncounted). A known length is
// taken at once and read into one buffer of that size, so that nothing is
// allocated beyond the budget; otherwise every chunk is taken as it
// arrives.
func readBody(r io.Reader, size int64, rb registry.ResultBytes) ([]byte, error) {
	if rb != nil && size >= 0 && size <= maxMessageBytes {
		if !rb.Take(size) {
			return nil, registry.ErrResultBudget
		}
		buf := make([]byte, size)
		n, err := readFullInSteps(r, buf)
		return buf[:n], err
	}
	if rb != nil {
		r = &countingReader{r: r, rb: rb}
	}
	var b blockBuffer
	err := b.readFrom(io.LimitReader(r, maxMessageBytes+1))
	if err == nil && b.n > maxMessageBytes {
		err = errTooLarge
	}
	if err != nil {
		b.discard()
		return nil, err
	}
	return b.bytes(), nil
}

// maxBlock is the largest block a blockBuffer copies in one piece.
const maxBlock = 256 << 10

// blockBuffer collects an answer of unknown length (a JSON body without
// Content-Length, an SSE line) in blocks, and joins them once, block by
// block. Growing one slice, as append and io.ReadAll do, copies what it
// holds in one memmove, which cannot be preempted: for a 12 MiB answer
// that held the garbage collector's stop-the-world for tens of
// milliseconds, and every other tenant's call with it (docs/design.md,
// "Budgets").
type blockBuffer struct {
	full [][]byte // blocks filled, each at most maxBlock
	last []byte
	n    int
}

// blocks are the blocks of maxBlock bytes that blockBuffers fill. A buffer
// gives them back once what they held is copied out or dropped: an upstream
// whose answers the result-byte budget refuses after megabytes made a
// replica allocate, clear and collect those megabytes again for every call,
// and the collections slowed every tenant's calls (docs/design.md,
// "Budgets").
var blocks = sync.Pool{New: func() any { return new([maxBlock]byte) }}

// next starts a block, twice the last one's size up to maxBlock and at
// least atLeast: a short answer, the common case, is held in one block of
// about its length.
func (b *blockBuffer) next(atLeast int) {
	if b.last != nil {
		b.full = append(b.full, b.last)
	}
	if size := min(maxBlock, max(atLeast, 2*cap(b.last))); size < maxBlock {
		b.last = make([]byte, 0, size)
	} else {
		b.last = blocks.Get().(*[maxBlock]byte)[:0]
	}
}

func (b *blockBuffer) write(p []byte) {
	b.n += len(p)
	for len(p) > 0 {
		if len(b.last) == cap(b.last) {
			b.next(len(p))
		}
		k := min(len(p), cap(b.last)-len(b.last))
		b.last, p = append(b.last, p[:k]...), p[k:]
	}
}

// readFrom reads r to its end into the blocks; io.EOF is no error.
func (b *blockBuffer) readFrom(r io.Reader) error {
	for {
		if len(b.last) == cap(b.last) {
			b.next(512) // io.ReadAll's first read
		}
		n, err := r.Read(b.last[len(b.last):cap(b.last)])
		b.last, b.n = b.last[:len(b.last)+n], b.n+n
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// bytes is what the buffer holds, in one slice: its one block, or its
// blocks joined, which it gives back. The buffer is empty after.
func (b *blockBuffer) bytes() []byte {
	if b.full == nil {
		held := b.last
		*b = blockBuffer{}
		return held
	}
	joined := make([]byte, 0, b.n)
	for _, blk := range b.full {
		joined = append(joined, blk...)
	}
	joined = append(joined, b.last...)
	b.discard()
	return joined
}

// discard gives the buffer's blocks of maxBlock bytes back and empties it:
// what it held must not be used after.
func (b *blockBuffer) discard() {
	for _, blk := range b.full {
		putBlock(blk)
	}
	putBlock(b.last)
	*b = blockBuffer{}
}

func putBlock(blk []byte) {
	if cap(blk) == maxBlock {
		blocks.Put((*[maxBlock]byte)(blk[:maxBlock]))
	}
}

// countingReader takes what it reads from rb; a read beyond it hands on
// none of its bytes.
type countingReader struct {
	r  io.Reader
	rb interface{ Take(n int64) bool } // a registry.ResultBytes, or an event's heldBytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.rb.Take(int64(n)) {
		return 0, registry.ErrResultBudget
	}
	return n, err
}

// readFullInSteps is io.ReadFull that asks for at most maxBlock bytes a
// read: one read into a 12 MiB buffer copies whatever the socket holds, a
// few megabytes, in one system call that holds a core for milliseconds
// (docs/design.md, "Budgets").
func readFullInSteps(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := io.ReadFull(r, buf[n:min(len(buf), n+maxBlock)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
