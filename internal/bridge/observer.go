package bridge

import "time"

// Observer receives measurements for metrics; implementations must not block.
type Observer interface {
	// ToolCall reports one tools/call: outcome is "success", "tool_error"
	// (isError), "error" or "unavailable".
	ToolCall(outcome string, d time.Duration)
	// ToolSync reports one fetch-and-swap; ok is false when it failed.
	ToolSync(ok bool, d time.Duration)
}

type nopObserver struct{}

func (nopObserver) ToolCall(string, time.Duration) {}
func (nopObserver) ToolSync(bool, time.Duration)   {}
