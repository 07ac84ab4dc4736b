package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbridge/operator/internal/jsonspan"
)

// decodeWithMaps is what decodeMessage must agree with: the message read
// with encoding/json into maps, the fast path's decoder before it read the
// body in place.
func decodeWithMaps(body []byte) (*message, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || string(top["jsonrpc"]) != `"2.0"` {
		return nil, false
	}
	m := &message{ID: top["id"]}
	if !unmarshalIfPresent(top["method"], &m.Method) || (m.ID != nil && !validID(m.ID)) {
		return nil, false
	}
	if top["params"] == nil {
		return m, true
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(top["params"], &params) != nil ||
		!unmarshalIfPresent(params["name"], &m.Params.Name) ||
		!unmarshalIfPresent(params["_meta"], &m.Params.Meta) {
		return nil, false
	}
	m.Params.Arguments, m.Params.RequestID = params["arguments"], params["requestId"]
	return m, true
}

func unmarshalIfPresent(raw json.RawMessage, v any) bool {
	return raw == nil || json.Unmarshal(raw, v) == nil
}

func TestDecodeMessageAgreesWithEncodingJSON(t *testing.T) {
	for name, body := range map[string]string{
		"sessionless call": string(benchBody),
		"stateful call":    `{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"mcp__fx__echo","arguments":{"text":"hi"}}}`,
		"whitespace":       " {\n \"jsonrpc\" : \"2.0\" ,\t\"id\" : 7 , \"method\" : \"tools/call\" , \"params\" : { \"name\" : \"t\" , \"arguments\" : [ 1 , {\"a\" : \"}\"} ] , \"_meta\" : { \"k\" : true } } }\r\n",
		"cancellation":     `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x","reason":"r"}}`,
		"no params":        `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		"null params":      `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`,
		"array params":     `{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}`,
		"string params":    `{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}`,
		"null method":      `{"jsonrpc":"2.0","id":1,"method":null}`,
		"number method":    `{"jsonrpc":"2.0","id":1,"method":7}`,
		"escaped method":   `{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"caf\u00e9 \"x\""}}`,
		"non-ASCII name":   `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"café"}}`,
		"escaped key":      `{"jsonrpc":"2.0","\u0069d":1,"met\u0068od":"tools/call","params":{"n\u0061me":"t"}}`,
		"other case key":   `{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","Params":{"name":"t"}}`,
		"duplicate keys":   `{"jsonrpc":"2.0","id":1,"id":2,"method":"a","method":"tools/call","params":{"name":"a","name":"b"}}`,
		"wrong version":    `{"jsonrpc":"2.1","id":1,"method":"ping"}`,
		"escaped version":  `{"jsonrpc":"2\u002e0","id":1,"method":"ping"}`,
		"null id":          `{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		"float id":         `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`,
		"negative id":      `{"jsonrpc":"2.0","id":-3,"method":"ping"}`,
		"leading zero id":  `{"jsonrpc":"2.0","id":01,"method":"ping"}`,
		"object id":        `{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		"null name":        `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null}}`,
		"number name":      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":1}}`,
		"null meta":        `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":null}}`,
		"empty meta":       `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{}}}`,
		"array meta":       `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":[]}}`,
		"escaped meta key": `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"trace\u0070arent":"00-x","a":1,"a":2}}}`,
		"nested strings":   `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"s":"a\\\"]}{[","t":["\"",{}]},"name":"t"}}`,
		"batch":            `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		"null":             `null`,
		"string":           `"x"`,
		"invalid":          `{"jsonrpc":"2.0","id":1,"method":"ping"`,
		"trailing data":    `{"jsonrpc":"2.0","id":1,"method":"ping"} {}`,
		"empty":            ``,
		"empty object":     `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, gotOK := decodeMessage([]byte(body))
			want, wantOK := decodeWithMaps([]byte(body))
			if gotOK != wantOK || !reflect.DeepEqual(got, want) {
				t.Errorf("decodeMessage(%s) = %+v, %v; encoding/json gives %+v, %v", body, got, gotOK, want, wantOK)
			}
		})
	}
}

// A message nested deeper than the SDK decodes is left to the SDK, which
// refuses it; one as deep as the SDK decodes is read. Either way the fast
// path and the SDK agree on what is a message.
func TestDecodeMessageLeavesTooDeepAMessageToTheSDK(t *testing.T) {
	// The message and its params are two levels; the arguments the rest.
	call := func(depth int) []byte {
		args := strings.Repeat("[", depth-2) + strings.Repeat("]", depth-2)
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":` + args + `}}`)
	}
	for _, tc := range []struct {
		depth int
		want  bool
	}{{jsonspan.MaxDepth, true}, {jsonspan.MaxDepth + 1, false}} {
		_, ok := decodeMessage(call(tc.depth))
		_, sdkErr := jsonrpc.DecodeMessage(call(tc.depth))
		if ok != tc.want || (sdkErr == nil) != tc.want {
			t.Errorf("nested %d deep: decodeMessage ok %v, the SDK's error %v; want read: %v", tc.depth, ok, sdkErr, tc.want)
		}
	}
}
