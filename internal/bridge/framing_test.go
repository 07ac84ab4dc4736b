package bridge

import (
	"encoding/json"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"testing"
)

// matchAnswerByDecoding and isErrorByDecoding are what matchAnswer and
// resultIsError must agree with: the answer decoded by encoding/json, as
// they read it before they read the message in place.
func matchAnswerByDecoding(data []byte, id string) (json.RawMessage, error) {
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("invalid JSON-RPC message from the server: %w", err)
	}
	if string(a.ID) != strconv.Quote(id) {
		if a.Error != nil && (len(a.ID) == 0 || string(a.ID) == "null") {
			return nil, a.Error
		}
		return nil, errNotOurs
	}
	if a.Error != nil {
		return nil, a.Error
	}
	return memberValue(data, "result"), nil
}

func isErrorByDecoding(res json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(res, &r) == nil && r.IsError
}

func TestMatchAnswerAgreesWithEncodingJSON(t *testing.T) {
	const id = "mcpbridge-7"
	for name, msg := range map[string]string{
		"answer":            string(benchAnswer),
		"whitespace":        " {\n\"result\" : {\"isError\" : true} , \"id\" : \"mcpbridge-7\" , \"jsonrpc\":\"2.0\"}\t",
		"other id":          `{"jsonrpc":"2.0","id":"mcpbridge-8","result":{}}`,
		"numeric id":        `{"jsonrpc":"2.0","id":7,"result":{}}`,
		"id in other case":  `{"jsonrpc":"2.0","ID":"mcpbridge-7","result":{}}`,
		"escaped id key":    `{"jsonrpc":"2.0","\u0069d":"mcpbridge-7","result":{}}`,
		"escaped id value":  `{"jsonrpc":"2.0","id":"mcpbridge\u002d7","result":{}}`,
		"duplicate ids":     `{"jsonrpc":"2.0","id":"mcpbridge-7","Id":"x","result":{}}`,
		"result other case": `{"jsonrpc":"2.0","id":"mcpbridge-7","Result":{}}`,
		"two results":       `{"jsonrpc":"2.0","id":"mcpbridge-7","result":{"a":1},"result":{"b":2}}`,
		"error":             `{"jsonrpc":"2.0","id":"mcpbridge-7","error":{"code":-32602,"message":"bad"}}`,
		"null error":        `{"jsonrpc":"2.0","id":"mcpbridge-7","error":null,"result":{}}`,
		"error then null":   `{"jsonrpc":"2.0","id":"mcpbridge-7","error":{"code":1,"message":"m"},"ERROR":null,"result":{}}`,
		"error other case":  `{"jsonrpc":"2.0","id":"mcpbridge-7","Error":{"code":1,"message":"m"},"result":{}}`,
		"error not object":  `{"jsonrpc":"2.0","id":"mcpbridge-7","error":5,"result":{}}`,
		"parse error":       `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}`,
		"no result":         `{"jsonrpc":"2.0","id":"mcpbridge-7"}`,
		"null result":       `{"jsonrpc":"2.0","id":"mcpbridge-7","result":null}`,
		"nested strings":    `{"jsonrpc":"2.0","id":"mcpbridge-7","result":{"content":[{"type":"text","text":"}\"]{"}],"isError":false}}`,
		"array":             `[{"jsonrpc":"2.0","id":"mcpbridge-7","result":{}}]`,
		"null":              `null`,
		"invalid":           `{"jsonrpc":"2.0","id":"mcpbridge-7","result":{}`,
		"trailing data":     `{"jsonrpc":"2.0","id":"mcpbridge-7","result":{}} x`,
	} {
		t.Run(name, func(t *testing.T) { checkMatchAnswer(t, msg, id) })
	}
	for name, res := range invalidResults {
		t.Run(name, func(t *testing.T) { checkMatchAnswer(t, `{"jsonrpc":"2.0","id":"mcpbridge-7","result":`+res+`}`, id) })
	}
}

// invalidResults are results that encoding/json refuses or accepts at the
// edges of its grammar: the validity check of matchAnswer's fast path
// must take what encoding/json takes and refuse what it refuses.
var invalidResults = map[string]string{
	"leading zero":         `{"n":01}`,
	"bare minus":           `{"n":-}`,
	"no fraction digits":   `{"n":1.}`,
	"no exponent digits":   `{"n":1e+}`,
	"exponent":             `{"n":-0.5E-3}`,
	"plus sign":            `{"n":+1}`,
	"hex":                  `{"n":0x1}`,
	"short literal":        `{"b":tru}`,
	"long literal":         `{"b":falsey}`,
	"capital literal":      `{"b":True}`,
	"control in string":    "{\"text\":\"a\x01b\"}",
	"tab in string":        "{\"text\":\"a\tb\"}",
	"bad escape":           `{"text":"a\xb"}`,
	"short unicode escape": `{"text":"\u12"}`,
	"lone surrogate":       `{"text":"\ud800"}`,
	"invalid UTF-8":        "{\"text\":\"\xff\xfe\"}",
	"escaped quote at end": `{"text":"a\"}`,
	"escaped backslashes":  `{"text":"a\\\\"}`,
	"trailing comma":       `{"a":1,}`,
	"missing colon":        `{"a" 1}`,
	"single quotes":        `{'a':1}`,
	"vertical tab":         "{\"a\":\v1}",
	"unclosed array":       `{"a":[1,2}`,
	"nested 1001 deep":     strings.Repeat("[", 1001) + strings.Repeat("]", 1001),
	"nested 10001 deep":    strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	"unclosed nesting":     strings.Repeat("[", 5000),
	"megabyte string":      `{"text":"` + strings.Repeat("x\\\"", 1<<18) + `"}`,
}

// checkMatchAnswer: matchAnswer gives msg the result and error that
// decoding it with encoding/json gives.
func checkMatchAnswer(t *testing.T, msg, id string) {
	t.Helper()
	got, gotErr := matchAnswer([]byte(msg), id)
	want, wantErr := matchAnswerByDecoding([]byte(msg), id)
	if len(want) == 0 && wantErr == nil {
		wantErr = fmt.Errorf("the server answered without a result")
	}
	if string(got) != string(want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Errorf("matchAnswer(%.200q) = %.200s, %v; encoding/json gives %.200s, %v", msg, got, gotErr, want, wantErr)
	}
}

// FuzzMatchAnswerAgreesWithEncodingJSON runs its seeds in go test; with
// -fuzz it looks for a message the two read differently.
func FuzzMatchAnswerAgreesWithEncodingJSON(f *testing.F) {
	for _, res := range invalidResults {
		if len(res) < 4096 {
			f.Add(`{"jsonrpc":"2.0","id":"mcpbridge-7","result":` + res + `}`)
		}
	}
	f.Add(string(benchAnswer))
	f.Fuzz(func(t *testing.T, msg string) { checkMatchAnswer(t, msg, "mcpbridge-7") })
}

func TestResultIsErrorAgreesWithEncodingJSON(t *testing.T) {
	for _, res := range []string{
		`{"content":[],"isError":true}`, `{"isError":false}`, `{}`, `{"content":[{"text":"\"isError\":true"}]}`,
		`{"IsError":true}`, `{"iserror":true,"isError":false}`, `{"isError":false,"ISERROR":true}`,
		`{"is\u0045rror":true}`, `{"isError":null}`, `{"isError":true,"isError":null}`, `{"isError":"true"}`,
		`{"isError":true,"x":{"isError":false}}`, `{"isError":1}`, `{"isError":true,"isError":[]}`,
		`null`, `[]`, `"x"`, `7`, ` { "isError" : true } `,
	} {
		if got, want := resultIsError(json.RawMessage(res)), isErrorByDecoding(json.RawMessage(res)); got != want {
			t.Errorf("resultIsError(%s) = %v, encoding/json gives %v", res, got, want)
		}
	}
}

func TestMediaTypeAgreesWithMime(t *testing.T) {
	for _, ct := range []string{
		"application/json", "text/event-stream", "application/json; charset=utf-8", "Text/Event-Stream",
		" application/json", "application/json;", "text/event-stream;x", "", "text/html", "application/json; =bad", "/",
	} {
		want, _, _ := mime.ParseMediaType(ct)
		if got := mediaType(ct); got != want {
			t.Errorf("mediaType(%q) = %q, mime.ParseMediaType gives %q", ct, got, want)
		}
	}
}

// encodeCall writes what encode writes, byte for byte.
func TestEncodeCallAgreesWithEncode(t *testing.T) {
	sessionless := &callMeta{requestMeta: &requestMeta{ProtocolVersion: "2026-07-28", ClientInfo: clientImpl}}
	traced := &callMeta{requestMeta: sessionless.requestMeta, Traceparent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}
	metas := map[string]*callMeta{"none": nil, "sessionless": sessionless, "traced": traced,
		"trace only": {Traceparent: traced.Traceparent, Tracestate: "k=v"}}
	names := []string{"echo", "a<b>&c", `say "hi"`, `back\slash`, "café", "tab\there", "\u2028", ""}
	args := []string{`{}`, `{"text":"hello"}`, " {\n \"a\" : [ 1 , 2 ] ,\t\"b\":\"<&>\" } ", `null`, `{"s":"\u00e9\n"}`, `[]`}
	for metaName, meta := range metas {
		for _, name := range names {
			for _, a := range args {
				msg := callRequest{JSONRPC: "2.0", ID: "mcpbridge-7", Method: "tools/call",
					Params: callParams{Name: name, Arguments: json.RawMessage(a), Meta: meta}}
				got, gotErr := encodeCall(msg)
				want, wantErr := encode(msg)
				if string(got) != string(want) || (gotErr == nil) != (wantErr == nil) {
					t.Errorf("meta %s, name %q, arguments %s:\n encodeCall %s, %v\n encode     %s, %v", metaName, name, a, got, gotErr, want, wantErr)
				}
			}
		}
	}
}
