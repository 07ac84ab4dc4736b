package bridge

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
	"testing/iotest"

	. "github.com/onsi/gomega"

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
		r := newEventStream(bytes.NewReader(line), held)
		defer r.release()
		if _, err := readEventLine(&r); !errors.Is(err, registry.ErrResultBudget) {
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

// everyRead records how many bytes each Read asked for.
type everyRead struct {
	r     *bytes.Reader
	sizes []int
}

func (c *everyRead) Read(p []byte) (int, error) {
	c.sizes = append(c.sizes, len(p))
	return c.r.Read(p)
}

// A line longer than the first buffer is read from the connection in reads
// of the long buffer, not 4 KiB at a time (a system call each), and the
// lines after it are read whole.
func TestALongLineIsReadInLongReads(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 1<<20)
	stream := slices.Concat([]byte("id: 7\n"), []byte("data: "), long, []byte("\n\nid: 8\ndata: after\n"))
	src := &everyRead{r: bytes.NewReader(stream)}
	r := newEventStream(src, &heldBytes{})
	defer r.release()
	want := [][]byte{[]byte("id: 7"), slices.Concat([]byte("data: "), long), {}, []byte("id: 8"), []byte("data: after")}
	for i, w := range want {
		line, err := readEventLine(&r)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !bytes.Equal(line, w) {
			t.Fatalf("line %d: %d bytes, want %d", i, len(line), len(w))
		}
	}
	// One read of the first buffer, then reads of the long one (the last
	// of them what is left of it).
	if most := len(stream)/longLineBuffer + 3; len(src.sizes) > most {
		t.Errorf("the stream of %d bytes took %d reads, want at most %d", len(stream), len(src.sizes), most)
	}
}

// What a long buffer reads counts as it is read: a line that stalls once it
// outgrew the first buffer holds all that was sent of it, not only what was
// handed on, and what is handed on after is not counted again.
func TestALongBufferCountsWhatItReads(t *testing.T) {
	g := NewWithT(t)
	pool := &readPool{max: 1 << 20}
	src, sent := io.Pipe()
	r := newEventStream(src, &heldBytes{rb: pool.lease()})
	defer r.release()
	line := slices.Concat([]byte("data: "), bytes.Repeat([]byte("x"), 45<<10))
	read := make(chan []byte, 1)
	go func() {
		got, _ := readEventLine(&r)
		read <- got
	}()
	_, err := sent.Write(line) // returns once the reader has read it all
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(pool.held.Load, eventually).Should(BeEquivalentTo(len(line)), "held while the line stalls")
	g.Expect(sent.Close()).To(Succeed())
	g.Expect(<-read).To(Equal(line))
	g.Expect(pool.held.Load()).To(BeEquivalentTo(len(line)), "held once the line is handed on")
}
