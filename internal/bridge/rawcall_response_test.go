package bridge

import (
	"bytes"
	"slices"
	"testing"
	"testing/iotest"
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
			if got := b.bytes(); !bytes.Equal(got, want) || b.n != len(want) {
				t.Fatalf("joined %d bytes (n %d), want the %d written", len(got), b.n, len(want))
			}
			for _, blk := range append(b.full, b.last) {
				if cap(blk) > maxBlock {
					t.Errorf("a block of %d bytes, want at most %d: growing it copies more in one piece", cap(blk), maxBlock)
				}
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
	if got := b.bytes(); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d of the body", len(got), len(want))
	}
	for _, blk := range append(b.full, b.last) {
		if cap(blk) > maxBlock {
			t.Errorf("a block of %d bytes, want at most %d", cap(blk), maxBlock)
		}
	}
}
