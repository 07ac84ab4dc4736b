package toolsets

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
)

func published(t *testing.T, tools ...*mcp.Tool) []registry.Tool {
	t.Helper()
	r := registry.New()
	if _, err := r.Swap("ns", "ns/s", "s", tools, nil); err != nil {
		t.Fatal(err)
	}
	return r.Owned("ns", "ns/s")
}

func tool(name, desc string) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: desc, InputSchema: &jsonschema.Schema{Type: "object"}}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []*mcp.Tool
	}{
		{"none", nil},
		{"one", []*mcp.Tool{tool("echo", "says it back")}},
		{"several", []*mcp.Tool{tool("b", "second"), tool("a", "first"), tool("c", strings.Repeat("x", 5000))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := published(t, tc.tools...)
			enc, err := Encode(in)
			if err != nil {
				t.Fatal(err)
			}
			if int(enc.Count) != len(tc.tools) {
				t.Errorf("count %d, want %d", enc.Count, len(tc.tools))
			}
			out, err := Decode(enc.Gzip)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(in) {
				t.Fatalf("decoded %d tools, want %d", len(out), len(in))
			}
			for i := range out {
				if out[i].Name != in[i].RawName || out[i].Description != in[i].Upstream().Description {
					t.Errorf("tool %d: got %q %q, want %q", i, out[i].Name, out[i].Description, in[i].RawName)
				}
			}
			again, _ := Encode(in)
			if again.Digest != enc.Digest {
				t.Error("the same tools encode to another digest")
			}
		})
	}
}

func TestEncodeDigestFollowsTheTools(t *testing.T) {
	a, _ := Encode(published(t, tool("echo", "one")))
	b, _ := Encode(published(t, tool("echo", "two")))
	if a.Digest == b.Digest {
		t.Error("a changed description kept the digest")
	}
}

func TestEncodeRefusesWhatAnObjectCannotCarry(t *testing.T) {
	var tools []*mcp.Tool
	// Random-looking descriptions do not compress away.
	for i := range 400 {
		var b strings.Builder
		for j := range 600 {
			fmt.Fprintf(&b, "%x", (i*7919+j*104729)*2654435761%4294967291)
		}
		tools = append(tools, tool(fmt.Sprintf("t%03d", i), b.String()))
	}
	_, err := Encode(published(t, tools...))
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("got %v, want a TooLargeError", err)
	}
	if !strings.Contains(err.Error(), "McpToolSet") {
		t.Errorf("the error does not say what is too small: %v", err)
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	if _, err := Decode([]byte("not gzip")); err == nil {
		t.Error("garbage decoded")
	}
}

// Decode keeps each tool's schemas as the JSON they are (as maps they take
// many times their bytes, on every replica that mirrors the set), and what
// it decodes publishes the same tools again.
func TestDecodeKeepsSchemasAsJSON(t *testing.T) {
	in := published(t,
		&mcp.Tool{Name: "a", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`),
			OutputSchema: json.RawMessage(`{"type":"object"}`)},
		tool("b", "no output schema"))
	enc, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(enc.Gzip)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range out {
		if _, ok := tl.InputSchema.(json.RawMessage); !ok {
			t.Errorf("tool %s: input schema decoded as %T, want json.RawMessage", tl.Name, tl.InputSchema)
		}
	}
	if _, ok := out[0].OutputSchema.(json.RawMessage); !ok || out[1].OutputSchema != nil {
		t.Errorf("output schemas %T and %v, want json.RawMessage and nil", out[0].OutputSchema, out[1].OutputSchema)
	}
	again, err := Encode(published(t, out...))
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != enc.Digest {
		t.Error("the decoded tools publish other tools than the ones encoded")
	}
}
