package gateway

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The fast path frames JSON-RPC itself rather than with go-sdk's
// jsonrpc.DecodeMessage and EncodeMessage; these benchmarks measure why
// (docs/benchmarks.md, "JSON-RPC framing"):
//
//	go test -run XXX -bench Framing -benchmem ./internal/gateway/

var benchBody = []byte(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"mcp__fx__echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)

func BenchmarkFramingDecodeOurs(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := decodeMessage(benchBody); !ok {
			b.Fatal("no")
		}
	}
}

func BenchmarkFramingDecodeSDK(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := jsonrpc.DecodeMessage(benchBody)
		if err != nil {
			b.Fatal(err)
		}
		req := m.(*jsonrpc.Request)
		var params map[string]json.RawMessage
		if json.Unmarshal(req.Params, &params) != nil {
			b.Fatal("p")
		}
		var name string
		_ = json.Unmarshal(params["name"], &name)
		var meta map[string]json.RawMessage
		_ = json.Unmarshal(params["_meta"], &meta)
	}
}

var benchResult = json.RawMessage(`{"content":[{"type":"text","text":"hello"}],"structuredContent":{"text":"hello","length":5,"pid":1234}}`)

func BenchmarkFramingEncodeResponseOurs(b *testing.B) {
	b.ReportAllocs()
	id := json.RawMessage(`11`)
	for b.Loop() {
		buf := make([]byte, 0, len(id)+len(benchResult)+40)
		buf = append(buf, `{"jsonrpc":"2.0","id":`...)
		buf = append(buf, id...)
		buf = append(buf, `,"result":`...)
		buf = append(buf, benchResult...)
		buf = append(buf, '}', '\n')
		_ = buf
	}
}

func BenchmarkFramingEncodeResponseSDK(b *testing.B) {
	b.ReportAllocs()
	id, _ := jsonrpc.MakeID(float64(11))
	for b.Loop() {
		if _, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: benchResult}); err != nil {
			b.Fatal(err)
		}
	}
}
