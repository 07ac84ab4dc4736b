package jsonspan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// For valid JSON, AppendCompact writes what encoding/json's Compact does.
func FuzzAppendCompactAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add(s)
	}
	f.Add(" { \"a\" :\t[ 1 ,\n\"b c\\\" d\" , {\r} ] , \"\\\\\" : -1.5e3 } ")
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(s)); err != nil {
			t.Fatal(err)
		}
		if got := AppendCompact([]byte("x"), []byte(s)); string(got) != "x"+want.String() {
			t.Errorf("AppendCompact(%q) = %q, want %q", s, got[1:], want.String())
		}
	})
}

// go test -run XXX -bench Compact -benchmem ./internal/jsonspan/
func BenchmarkCompactOurs4MiBObjects(b *testing.B) { benchCompact(b, bigMessage, AppendCompact) }
func BenchmarkCompactEncodingJSON4MiBObjects(b *testing.B) {
	benchCompact(b, bigMessage, appendCompactEncodingJSON)
}
func BenchmarkCompactOurs4MiBString(b *testing.B) { benchCompact(b, bigString, AppendCompact) }
func BenchmarkCompactEncodingJSON4MiBString(b *testing.B) {
	benchCompact(b, bigString, appendCompactEncodingJSON)
}

func appendCompactEncodingJSON(dst, d []byte) []byte {
	b := bytes.NewBuffer(dst)
	_ = json.Compact(b, d)
	return b.Bytes()
}

func benchCompact(b *testing.B, msg []byte, compact func(dst, d []byte) []byte) {
	b.SetBytes(int64(len(msg)))
	dst := make([]byte, 0, len(msg))
	for b.Loop() {
		dst = compact(dst[:0], msg)
	}
}
