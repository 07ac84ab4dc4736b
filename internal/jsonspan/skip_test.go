package jsonspan

import (
	"strings"
	"testing"
)

// TestSkipStringAgreesWithAScan: skipString ends a string where a scan of
// every byte, a backslash escaping the next one, ends it.
func TestSkipStringAgreesWithAScan(t *testing.T) {
	scan := func(data []byte, i int) int {
		for j := i + 1; j < len(data); j++ {
			switch data[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(data)
	}
	for _, s := range []string{
		`""`, `"a"x`, `"a\"b"x`, `"a\\"b"`, `"a\\\"b"c"`, `"\\\\"x"`, `"\"`, `"\`, `"abc`, `"`,
		`"\\\\\\"` + `"`, `"a\"\"\""x`, `"` + strings.Repeat(`\"`, 100) + `"x`, `"` + strings.Repeat("y", 5000) + `\\"z"`,
	} {
		if got, want := SkipString([]byte(s), 0), scan([]byte(s), 0); got != want {
			t.Errorf("SkipString(%q) = %d, a scan gives %d", s, got, want)
		}
	}
}
