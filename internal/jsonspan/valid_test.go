package jsonspan

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	`{}`, `[]`, `null`, `true`, `0`, `-0.5e+3`, `"a\u00e9\"\\"`, ` {"a" : [1, {"b": null}], "c": "}"} `,
	`{"a":1,}`, `[1,]`, `{"a"}`, `01`, `1.`, `"\x"`, "\"\x01\"", `"\ud800"`, "\"\xff\"", `{} {}`, ``, ` `,
	`[[[[[[]]]]]]`, `{"a":{"b":{"c":[]}}}`, `nul`, `tru`, `"unterminated`, `{"a":1}}`, `]`,
}

// Within MaxDepth, Valid is encoding/json's Valid; deeper, it refuses.
func FuzzValidAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := json.Valid([]byte(s)) && !NestedDeeperThan([]byte(s), MaxDepth)
		if got := Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	})
}

func TestValidRefusesWhatTheSDKWouldNotDecode(t *testing.T) {
	nest := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	if !Valid(nest(MaxDepth)) {
		t.Errorf("Valid refused JSON nested %d deep, as deep as the SDK decodes", MaxDepth)
	}
	if Valid(nest(MaxDepth + 1)) {
		t.Errorf("Valid accepted JSON nested %d deep, deeper than the SDK decodes", MaxDepth+1)
	}
	// A string's brackets are not nesting.
	if deep := `"` + strings.Repeat("[", 2*MaxDepth) + `"`; !Valid([]byte(deep)) {
		t.Error("Valid refused a string of brackets")
	}
}

// Messages of 4 MiB of arguments, what an agent may send (the gateway's
// body limit): many small objects, and one string.
var bigMessage = func() []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"rows":[`)
	for b.Len() < 4<<20 {
		b.WriteString(`{"id":12345,"name":"a name with \"quotes\" and caf\u00e9","tags":["x","y"],"score":0.75,"ok":true},`)
	}
	b.WriteString(`{}]}}}`)
	return []byte(b.String())
}()

var bigString = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"content":"` +
	strings.Repeat(`a line of a file, with \"quotes\"\n`, 4<<20/36) + `"}}}`)

// go test -run XXX -bench Valid -benchmem ./internal/jsonspan/
func BenchmarkValidOurs4MiBObjects(b *testing.B)         { benchValid(b, bigMessage, Valid) }
func BenchmarkValidEncodingJSON4MiBObjects(b *testing.B) { benchValid(b, bigMessage, json.Valid) }
func BenchmarkValidOurs4MiBString(b *testing.B)          { benchValid(b, bigString, Valid) }
func BenchmarkValidEncodingJSON4MiBString(b *testing.B)  { benchValid(b, bigString, json.Valid) }

func benchValid(b *testing.B, msg []byte, valid func([]byte) bool) {
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if !valid(msg) {
			b.Fatal("invalid")
		}
	}
}
