package bridge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unsafe"

	"github.com/mcpbridge/operator/internal/registry"
)

// memberValue finds a top-level member as a slice of the message, whatever
// the nesting, strings or escapes around it.
func TestMemberValueFindsTheTopLevelMember(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"plain", `{"id":"a","result":{"x":1}}`, `{"x":1}`},
		{"first", `{"result":[1,2],"id":"a"}`, `[1,2]`},
		{"spaces", " { \"id\" : 1 ,\n\t\"result\" :\r\n\"s\" } ", `"s"`},
		{"nested-result-ignored", `{"id":{"result":1},"result":2}`, `2`},
		{"braces-in-strings", `{"a":"}{][\"","result":{"t":"}\"]"},"b":3}`, `{"t":"}\"]"}`},
		{"escaped-key", `{"res\u0075lt":true}`, `true`},
		{"last-of-two", `{"result":1,"result":null}`, `null`},
		{"number-at-end", `{"result":-1.5e3}`, `-1.5e3`},
		{"absent", `{"id":"a","error":{"result":1}}`, ``},
		{"not-an-object", `[{"result":1}]`, ``},
		{"other-case-is-another-member", `{"Result":1}`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(memberValue([]byte(tc.data), "result")); got != tc.want {
				t.Fatalf("memberValue(%s) = %q, want %q", tc.data, got, tc.want)
			}
		})
	}
}

// budget is a registry.ResultBytes of max bytes that remembers the most it held.
type budget struct{ max, held, peak int64 }

func (b *budget) Take(n int64) bool {
	if b.held+n > b.max {
		return false
	}
	b.held += n
	b.peak = max(b.peak, b.held)
	return true
}

func (b *budget) Return(n int64) { b.held -= n }

func response(contentType, body string, length int64) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {contentType}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: length}
}

// The answer is read into memory once and counted: a result beyond the
// budget fails the call with registry.ErrResultBudget, with or without a length;
// notifications before the answer are given back; the result handed out
// is the memory that was read, not a copy.
func TestReadAnswerCountsWhatItHoldsAndHoldsItOnce(t *testing.T) {
	const id = "mcpbridge-1"
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 100<<10) + `"}]}`
	answer := `{"jsonrpc":"2.0","id":"` + id + `","result":` + big + `}`
	note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"message":"` +
		strings.Repeat("p", 60<<10) + `"}}`
	stream := strings.Repeat("data: "+note+"\n\n", 20) + "data: " + answer + "\n\n"
	for _, tc := range []struct {
		name   string
		resp   func() *http.Response
		budget int64
		fits   bool
	}{
		{"json-with-length", func() *http.Response { return response("application/json", answer, int64(len(answer))) }, 200 << 10, true},
		{"json-with-length-over", func() *http.Response { return response("application/json", answer, int64(len(answer))) }, 50 << 10, false},
		{"json-chunked", func() *http.Response { return response("application/json", answer, -1) }, 200 << 10, true},
		{"json-chunked-over", func() *http.Response { return response("application/json", answer, -1) }, 50 << 10, false},
		// 20 notifications of 60 KiB pass through a budget of 200 KiB.
		{"sse", func() *http.Response { return response("text/event-stream", stream, -1) }, 200 << 10, true},
		{"sse-over", func() *http.Response { return response("text/event-stream", stream, -1) }, 50 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &budget{max: tc.budget}
			res, _, err := readAnswerFrom(context.Background(), tc.resp(), id, b, otherEvents{})
			if !tc.fits {
				if !errors.Is(err, registry.ErrResultBudget) {
					t.Fatalf("over the budget: got %v, want registry.ErrResultBudget", err)
				}
				return
			}
			if err != nil || string(res) != big {
				t.Fatalf("got %d bytes, %v; want the result", len(res), err)
			}
			if b.held < int64(len(big)) || b.held > int64(len(answer))+4<<10 {
				t.Fatalf("holds %d bytes counted for a result of %d", b.held, len(big))
			}
			// The result lies inside the one buffer that was counted.
			if b.peak > 2*int64(len(answer)) {
				t.Fatalf("counted %d bytes at the peak for an answer of %d", b.peak, len(answer))
			}
		})
	}
}

// matchAnswer hands out the result inside the message, not a copy of it.
func TestMatchAnswerDoesNotCopyTheResult(t *testing.T) {
	msg := []byte(`{"jsonrpc":"2.0","id":"mcpbridge-1","result":{"content":[]}}`)
	res, err := matchAnswer(msg, "mcpbridge-1")
	if err != nil {
		t.Fatal(err)
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(msg)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(res)))
	if at < start || at >= start+uintptr(len(msg)) {
		t.Fatalf("the result %s is a copy, not a part of the message", res)
	}
}

// An answer of megabytes is read at most maxBlock bytes a read, with its
// length known or not: one read into a 12 MiB buffer copies what the socket
// holds in one system call that holds a core for milliseconds.
func TestABigAnswerIsReadInSteps(t *testing.T) {
	body := strings.Repeat("x", 3*maxBlock+17)
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"length known", int64(len(body))},
		{"length unknown", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &readSizes{r: strings.NewReader(body)}
			got, err := readBody(r, tc.size, &budget{max: 1 << 30})
			if err != nil || string(got) != body {
				t.Fatalf("read %d bytes, %v; want the %d of the body", len(got), err, len(body))
			}
			if r.largest > maxBlock {
				t.Errorf("a read asked for %d bytes, more than %d", r.largest, maxBlock)
			}
		})
	}
}

// readSizes notes the largest buffer a Read was given.
type readSizes struct {
	r       io.Reader
	largest int
}

func (r *readSizes) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	return r.r.Read(p)
}
