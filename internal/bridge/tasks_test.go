package bridge

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestTaskRequiredToolIsPublishedButRefusedOnCall(t *testing.T) {
	s, reg := startSupervisor(t, stdioPolicy("--task-required-tool=task_only"))
	waitFor(t, s, "Ready", isReady)
	if !slices.Contains(toolNames(reg.Tools("ns")), "mcp__fx__task_only") {
		t.Fatalf("task_only not listed: %v", toolNames(reg.Tools("ns")))
	}
	_, err := s.CallTool(context.Background(), "task_only", map[string]any{"text": "x"})
	if err == nil || !strings.Contains(err.Error(), "requires task-based execution") {
		t.Fatalf("call of a task-required tool: %v, want a refusal", err)
	}
	res, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "still fine"})
	if err != nil || RenderText(res) != "still fine" {
		t.Fatalf("echo after the refusal: %v %v", res, err)
	}
}

func TestSniffReaderSeesWholeLines(t *testing.T) {
	var got []string
	tasks := &taskTools{}
	r := &sniffReader{ReadCloser: io.NopCloser(strings.NewReader("")), fn: func(b []byte) {
		got = append(got, string(b))
		tasks.sniff(b)
	}}
	// Lines split across reads, an SSE data line, and a line without the key.
	for _, chunk := range []string{
		`{"result":{"tools":[{"name":"a","execution":{"task`,
		`Support":"required"}},{"name":"b"}]}}` + "\n" + `data: {"result":{"tools":[{"name":"c","execution":{"taskSupport":"optional"}}]}}`,
		"\n" + `{"result":{}}` + "\n",
	} {
		r.feed([]byte(chunk))
	}
	if len(got) != 3 {
		t.Fatalf("lines %q, want 3", got)
	}
	for name, want := range map[string]bool{"a": true, "b": false, "c": false} {
		if tasks.required(name) != want {
			t.Errorf("required(%q) = %v, want %v", name, !want, want)
		}
	}
	tasks.reset()
	if tasks.required("a") {
		t.Error("reset kept a")
	}
}

// roundTripFunc answers every request with its func.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestARawCallsAnswerIsNotSniffed(t *testing.T) {
	const answer = `data: {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","execution":{"taskSupport":"required"}}]}}` + "\n\n"
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"a request of the SDK", context.Background(), 1},
		{"a raw tools/call", withoutSniff(context.Background()), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := 0
			rt := &sessionTransport{onLost: func(error) {}, linkCtx: context.Background(), sniff: func(b []byte) {
				if strings.Contains(string(b), "taskSupport") {
					lines++
				}
			}, base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
					Body: io.NopCloser(strings.NewReader(answer))}, nil
			})}
			req, _ := http.NewRequestWithContext(tc.ctx, http.MethodPost, "http://127.0.0.1:1/mcp", nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if lines != tc.want {
				t.Errorf("sniffed %d lines, want %d", lines, tc.want)
			}
		})
	}
}

func TestSniffReaderDropsALongLinesBuffer(t *testing.T) {
	r := &sniffReader{ReadCloser: io.NopCloser(strings.NewReader("")), fn: func([]byte) {}}
	r.feed([]byte(strings.Repeat("x", 1<<20) + "\n"))
	if cap(r.line) > keptSniffBuffer {
		t.Errorf("after a 1 MiB line the reader keeps %d bytes, want at most %d", cap(r.line), keptSniffBuffer)
	}
}
