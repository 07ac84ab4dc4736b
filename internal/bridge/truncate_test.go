package bridge

import (
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"shorter than the limit", "abc", 10, "abc"},
		{"exactly the limit", "abcdefghij", 10, "abcdefghij"},
		{"cut, with an ellipsis within the limit", "abcdefghijk", 10, "abcdefg..."},
		{"a cut inside a character drops the character", "ab€€€", 7, "ab..."},
		{"a cut after a character keeps it", "ab€€€", 8, "ab€..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.in, tc.n)
			if got != tc.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
			if len(got) > tc.n || !utf8.ValidString(got) {
				t.Fatalf("Truncate(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.in, tc.n, got, len(got), utf8.ValidString(got))
			}
		})
	}
}
