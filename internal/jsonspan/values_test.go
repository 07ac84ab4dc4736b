package jsonspan

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValuesCountsWhatADecoderMakes(t *testing.T) {
	for _, tc := range []struct {
		d    string
		want int
	}{
		{``, 0},
		{`  `, 0},
		{`1`, 1},
		{`"a,[{"`, 1},
		{`[1,2,3]`, 4},
		{`{"a":1,"b":[2,3]}`, 5},
		{`[[1]]`, 3},
		{`{"k,":"v[","w":{"x":null}}`, 4},
		{`"a\",[b"`, 1},
		{`[]`, 2},  // one more than it holds
		{`{}`, 2},  // the same
		{`[,,`, 4}, // not checked
	} {
		if got := Values([]byte(tc.d)); got != tc.want {
			t.Errorf("Values(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// For valid JSON without empty containers, Values is the count of the
// values encoding/json makes of it.
func TestValuesAgreesWithADecodedTree(t *testing.T) {
	for _, d := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"pad":[{"a":1,"b":[2,3]},{"a":1,"b":[2,3]}]}}}`,
		`[true,false,null,"x",1.5e3,{"s":"\u0022,"}]`,
		`{"a":{"b":{"c":["d",["e"]]}}}`,
		`"` + strings.Repeat(`,[{\"`, 100) + `"`,
	} {
		var v any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if got, want := Values([]byte(d)), countDecoded(v); got != want {
			t.Errorf("Values(%s) = %d, the decoded tree has %d", d, got, want)
		}
	}
}

func countDecoded(v any) int {
	n := 1
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			n += countDecoded(e)
		}
	case map[string]any:
		for _, e := range v {
			n += countDecoded(e)
		}
	}
	return n
}

func BenchmarkValues4MiBObjects(b *testing.B) {
	d := []byte(`[` + strings.Repeat(`{"a":1,"b":[2,3]},`, 4<<20/18) + `0]`)
	b.SetBytes(int64(len(d)))
	for b.Loop() {
		Values(d)
	}
}
