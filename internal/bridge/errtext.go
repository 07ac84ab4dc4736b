package bridge

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
)

// maxErrorText bounds the text of a failure the supervisor keeps and
// reports: in its snapshot (status cuts it again, to 1 KiB), its log lines
// and span statuses. An upstream words its own errors, and a message may be
// 16 MiB: a hostile server would otherwise have the manager keep that much
// per McpServer and write it to the log at every attempt (docs/design.md,
// "Budgets").
const maxErrorText = 4 << 10

// keptSentinels are the errors this package and its callers ask a failure
// about with errors.Is; a cut error still answers for them.
var keptSentinels = []error{
	context.Canceled, context.DeadlineExceeded, io.EOF, io.ErrUnexpectedEOF,
	mcp.ErrSessionMissing, mcp.ErrConnectionClosed,
	ErrUnavailable, ErrCloseTimeout, errSuspended, registry.ErrResultBudget,
	errTooLarge, errStreamEnded, errNotOurs, errBindsHeaders,
}

// cutError is a failure whose text was too long: the text cut, and what it
// still is (keptSentinels, and the typed errors of keptTypes).
type cutError struct {
	text string
	is   []error
}

func (e *cutError) Error() string   { return e.text }
func (e *cutError) Unwrap() []error { return e.is }

// boundError is err when its text is at most maxErrorText bytes and names
// no session id; otherwise an error with the text cut and the ids left out
// (withoutSessionIDs) that answers errors.Is and errors.As as err did for
// what is asked of failures here, and holds nothing else of err.
func boundError(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	kept := withoutSessionIDs(text)
	if len(kept) <= maxErrorText && kept == text {
		return err
	}
	cut := &cutError{text: Truncate(kept, maxErrorText)}
	for _, s := range keptSentinels {
		if errors.Is(err, s) {
			cut.is = append(cut.is, s)
		}
	}
	cut.is = append(cut.is, keptTypes(err)...)
	return cut
}

// keptTypes are the typed errors in err that callers look for with
// errors.As, each a copy with its upstream-chosen words cut.
func keptTypes(err error) []error {
	var kept []error
	if wire, ok := errors.AsType[*jsonrpc.Error](err); ok {
		kept = append(kept, &jsonrpc.Error{Code: wire.Code, Message: Truncate(wire.Message, maxInfoLen)})
	}
	if d, ok := errors.AsType[errDeadline](err); ok {
		kept = append(kept, d)
	}
	if d, ok := errors.AsType[errPodDeadline](err); ok {
		kept = append(kept, errPodDeadline{budget: d.budget, reason: Truncate(d.reason, maxInfoLen)})
	}
	if w, ok := errors.AsType[errWakeTimeout](err); ok {
		kept = append(kept, errWakeTimeout{timeout: w.timeout, why: Truncate(w.why, maxInfoLen)})
	}
	if b, ok := errors.AsType[*registry.ToolBudgetError](err); ok {
		kept = append(kept, b)
	}
	if c, ok := errors.AsType[*registry.ConflictError](err); ok {
		kept = append(kept, &registry.ConflictError{PublicName: c.PublicName, RawName: Truncate(c.RawName, maxInfoLen), HeldBy: c.HeldBy})
	}
	return kept
}

// newStageError is how a StageError is made: with its text bounded.
func newStageError(stage string, err error) *StageError {
	return &StageError{Stage: stage, Err: boundError(err)}
}

// sessionIDs finds the session ids the SDK writes into some of its errors
// ("failed to connect (session ID: …)", "mismatching session IDs … and …").
// A session id is what the upstream knows the manager's session by, and a
// failure's text goes to status, which the namespace reads, to the log and
// to spans: it names the session without its id (docs/design.md,
// "Status and conditions").
var sessionIDs = regexp.MustCompile(`(session ID: )[^)\s]*|(session IDs )"(?:[^"\\]|\\.)*" and "(?:[^"\\]|\\.)*"`)

// withoutSessionIDs is text with every session id sessionIDs finds left out.
func withoutSessionIDs(text string) string {
	if !strings.Contains(text, "session ID") {
		return text
	}
	return sessionIDs.ReplaceAllString(text, "${1}${2}redacted")
}
