package bridge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Calls posted over HTTP are framed by rawcall.go rather than with go-sdk's
// jsonrpc.EncodeMessage and DecodeMessage; these benchmarks measure why
// (docs/benchmarks.md, "JSON-RPC framing"):
//
//	go test -run XXX -bench Framing -benchmem ./internal/bridge/

var benchAnswer = []byte(`{"jsonrpc":"2.0","id":"mcpbridge-7","result":{"content":[{"type":"text","text":"hello"}],"structuredContent":{"text":"hello","length":5,"pid":1234}}}`)

func BenchmarkFramingMatchAnswerOurs(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := matchAnswer(benchAnswer, "mcpbridge-7"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFramingMatchAnswerOurs12MiB reads an answer of the size a
// hostile upstream sends in docs/benchmarks.md, "Isolation": one text of
// 12 MiB, validated and walked on the call's goroutine.
func BenchmarkFramingMatchAnswerOurs12MiB(b *testing.B) {
	text := strings.Repeat("0123456789abcdef", 12<<20/16)
	answer := []byte(`{"jsonrpc":"2.0","id":"mcpbridge-7","result":{"content":[{"type":"text","text":"` + text + `"}]}}`)
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := matchAnswer(answer, "mcpbridge-7"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFramingMatchAnswerSDK(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := jsonrpc.DecodeMessage(benchAnswer)
		if err != nil {
			b.Fatal(err)
		}
		r := m.(*jsonrpc.Response)
		if r.ID.Raw() != "mcpbridge-7" {
			b.Fatal("id")
		}
	}
}

func BenchmarkFramingEncodeCallOurs(b *testing.B) {
	b.ReportAllocs()
	args := json.RawMessage(`{"text":"hello"}`)
	for b.Loop() {
		msg := callRequest{JSONRPC: "2.0", ID: "mcpbridge-7", Method: "tools/call", Params: callParams{Name: "echo", Arguments: args,
			Meta: &callMeta{requestMeta: &requestMeta{ProtocolVersion: "2026-07-28", ClientInfo: clientImpl}}}}
		if _, err := encodeCall(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFramingEncodeCallSDK(b *testing.B) {
	b.ReportAllocs()
	args := json.RawMessage(`{"text":"hello"}`)
	id, _ := jsonrpc.MakeID("mcpbridge-7")
	for b.Loop() {
		p, err := encode(callParams{Name: "echo", Arguments: args, Meta: &callMeta{requestMeta: &requestMeta{ProtocolVersion: "2026-07-28", ClientInfo: clientImpl}}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: "tools/call", Params: p}); err != nil {
			b.Fatal(err)
		}
	}
}
