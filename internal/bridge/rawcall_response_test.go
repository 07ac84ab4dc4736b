package bridge

import (
	"bytes"
	"slices"
	"testing"
)

func TestLineBufferJoinsWhatItHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frags []int // fragment sizes
	}{
		{"one short fragment", []int{10}},
		{"full reader buffers and a tail", []int{4096, 4096, 4096, 17}},
		{"a line of 3 MiB in 4 KiB fragments", slices.Repeat([]int{4096}, 3<<8)},
		{"one fragment larger than a block", []int{lineBlock*2 + 5, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b lineBuffer
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
				if cap(blk) > lineBlock {
					t.Errorf("a block of %d bytes, want at most %d: growing it copies more in one piece", cap(blk), lineBlock)
				}
			}
		})
	}
}
