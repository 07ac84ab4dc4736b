package bridge

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Tools that require task-based execution (MCP 2025-11-25
// execution.taskSupport "required") cannot be called with a plain
// tools/call, and such a call must be refused clearly. go-sdk v1.8.0 drops the
// execution field when it decodes a tool, so the supervisor reads it off
// the wire: every line the server sends passes a sniffer that parses only
// the lines mentioning taskSupport.
// See docs/design.md, "Tool calls".

var taskSupportKey = []byte(`"taskSupport"`)

// maxSniffLine bounds the bytes buffered for one line; longer lines are
// not inspected (the SDK itself refuses stdio lines over 16 MiB).
const maxSniffLine = 16 << 20

// keptSniffBuffer is the largest line buffer a sniffReader keeps between
// lines.
const keptSniffBuffer = 64 << 10

// taskTools is the set of raw tool names that require tasks, per generation.
type taskTools struct {
	mu    sync.Mutex
	names map[string]bool
}

func (t *taskTools) reset() {
	t.mu.Lock()
	t.names = nil
	t.mu.Unlock()
}

func (t *taskTools) required(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[name]
}

// sniff reads one JSON-RPC message line (or an SSE "data:" line).
func (t *taskTools) sniff(line []byte) {
	if !bytes.Contains(line, taskSupportKey) {
		return
	}
	line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))
	var msg struct {
		Result taskList `json:"result"`
	}
	if json.Unmarshal(line, &msg) == nil {
		t.note(msg.Result)
	}
}

// sniffList reads a tools/list result that no sniffer saw: one the
// supervisor posted and read itself (listPage).
func (t *taskTools) sniffList(result []byte) {
	var list taskList
	if bytes.Contains(result, taskSupportKey) && json.Unmarshal(result, &list) == nil {
		t.note(list)
	}
}

// taskList is what a tools/list result says of tasks.
type taskList struct {
	Tools []struct {
		Name      string `json:"name"`
		Execution struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	} `json:"tools"`
}

func (t *taskTools) note(list taskList) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tool := range list.Tools {
		if tool.Execution.TaskSupport == "required" {
			if t.names == nil {
				t.names = map[string]bool{}
			}
			t.names[tool.Name] = true
		}
	}
}

// sniffReader passes bytes through and hands every complete line to fn.
type sniffReader struct {
	io.ReadCloser
	fn   func([]byte)
	line []byte
	skip bool // the current line grew past maxSniffLine
}

func (s *sniffReader) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.feed(p[:n])
	return n, err
}

func (s *sniffReader) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !s.skip && len(s.line)+len(chunk) <= maxSniffLine {
			s.line = append(s.line, chunk...)
		} else {
			s.skip, s.line = true, s.line[:0]
		}
		if i < 0 {
			return
		}
		if !s.skip {
			s.fn(s.line)
		}
		s.line, s.skip, b = s.line[:0], false, b[i+1:]
		if cap(s.line) > keptSniffBuffer {
			s.line = nil // one long line must not keep its buffer for the server's life
		}
	}
}
