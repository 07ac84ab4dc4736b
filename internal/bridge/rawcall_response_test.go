package bridge

import (
	"bufio"
	"bytes"
	"errors"
	"runtime"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/mcpbridge/operator/internal/registry"
)

func TestBlockBufferJoinsWhatItHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frags []int // fragment sizes
	}{
		{"one short fragment", []int{10}},
		{"full reader buffers and a tail", []int{4096, 4096, 4096, 17}},
		{"a line of 3 MiB in 4 KiB fragments", slices.Repeat([]int{4096}, 3<<8)},
		{"one fragment larger than a block", []int{maxBlock*2 + 5, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b blockBuffer
			var want []byte
			for i, n := range tc.frags {
				frag := bytes.Repeat([]byte{byte('a' + i%26)}, n)
				want = append(want, frag...)
				b.write(frag)
			}
			for _, blk := range append(b.full, b.last) {
				if cap(blk) > maxBlock {
					t.Errorf("a block of %d bytes, want at most %d: growing it copies more in one piece", cap(blk), maxBlock)
				}
			}
			n := b.n
			if got := b.bytes(); !bytes.Equal(got, want) || n != len(want) {
				t.Fatalf("joined %d bytes (n %d), want the %d written", len(got), n, len(want))
			}
		})
	}
}

func TestBlockBufferReadsABodyToItsEnd(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB in the reader's own pieces
	var b blockBuffer
	if err := b.readFrom(iotest.HalfReader(bytes.NewReader(want))); err != nil {
		t.Fatal(err)
	}
	for _, blk := range append(b.full, b.last) {
		if cap(blk) > maxBlock {
			t.Errorf("a block of %d bytes, want at most %d", cap(blk), maxBlock)
		}
	}
	if got := b.bytes(); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d of the body", len(got), len(want))
	}
}

// The blocks of a line the result-byte budget refused are used again for
// the next line: an upstream whose answers are refused after megabytes
// must not make the replica allocate those megabytes for every call.
func TestARefusedLineGivesItsBlocksBack(t *testing.T) {
	const size, runs = 4 << 20, 20
	line := bytes.Repeat([]byte("x"), size)
	read := func() {
		held := &heldBytes{rb: &budget{max: size / 2}}
		if _, err := readEventLine(bufio.NewReader(bytes.NewReader(line)), held); !errors.Is(err, registry.ErrResultBudget) {
			t.Fatalf("reading past the budget: %v, want %v", err, registry.ErrResultBudget)
		}
	}
	read() // fills the pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		read()
	}
	runtime.ReadMemStats(&after)
	// Each refused read holds 2 MiB when it is refused: about 256 KiB of
	// growing blocks are its own, the rest come from the pool. A garbage
	// collection between two reads may empty the pool once.
	if perRead := (after.TotalAlloc - before.TotalAlloc) / runs; perRead > 1<<20 {
		t.Fatalf("each refused read allocated %d KiB, want under 1 MiB: its blocks are not used again", perRead>>10)
	}
}
