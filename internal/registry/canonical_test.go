package registry

import (
	"encoding/json"
	"testing"
)

func TestCanonicalJSONOrdersMembersByName(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "scalar", in: `12.50`, want: `12.50`},
		{name: "string", in: `"b,a}"`, want: `"b,a}"`},
		{name: "empty object and array", in: `{"b":{},"a":[]}`, want: `{"a":[],"b":{}}`},
		{name: "nested objects", in: `{"type":"object","properties":{"q":{"type":"string","maxLength":10}}}`,
			want: `{"properties":{"q":{"maxLength":10,"type":"string"}},"type":"object"}`},
		{name: "arrays keep their order", in: `{"z":[{"b":1,"a":2},3,"x"],"a":null}`, want: `{"a":null,"z":[{"a":2,"b":1},3,"x"]}`},
		{name: "brackets and quotes inside strings", in: `{"b":"}{\"],","a":"[\\"}`, want: `{"a":"[\\","b":"}{\"],"}`},
		{name: "a name's escapes are decoded to order it", in: `{"b":1,"\u0061":2}`, want: `{"\u0061":2,"b":1}`},
		{name: "names that are prefixes", in: `{"ab":1,"a":2,"":3}`, want: `{"":3,"a":2,"ab":1}`},
		{name: "numbers as written", in: `{"b":1.0,"a":1e3}`, want: `{"a":1e3,"b":1.0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := canonicalJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("canonicalJSON(%s): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("canonicalJSON(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// The canonical form is the one json.Marshal gives the decoded value, so
// that a schema given as JSON and the same schema given as a map are one.
func TestCanonicalJSONIsWhatMarshalWritesForAMap(t *testing.T) {
	for _, in := range []string{
		`{"type":"object","required":["q"],"properties":{"q":{"type":"string","enum":["x","y"]},"n":{"type":"integer","minimum":0}},"additionalProperties":false}`,
		`[{"z":{"y":{"x":[1,{"w":true,"v":false}]}}},"<&>"]`,
	} {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(v)
		raw, _ := json.Marshal(json.RawMessage(in))
		got, err := canonicalJSON(raw)
		if err != nil || string(got) != string(want) {
			t.Errorf("canonicalJSON(%s) = %s, %v; want %s", raw, got, err, want)
		}
	}
}

func TestCanonicalJSONRefusesWhatIsNotCompactJSON(t *testing.T) {
	for _, in := range []string{``, `{"a":1`, `{"a" :1}`, `{"a":1,}`, `[1 2]`, `[1,2`, `{"a":1}x`, `{a:1}`} {
		if got, err := canonicalJSON([]byte(in)); err == nil {
			t.Errorf("canonicalJSON(%q) = %s, want an error", in, got)
		}
	}
}
