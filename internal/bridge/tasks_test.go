package bridge

import (
	"context"
	"io"
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
