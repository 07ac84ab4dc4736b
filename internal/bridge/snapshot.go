package bridge

import (
	"slices"
	"strings"
	"time"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// Snapshot is what a supervisor reports; the controller turns it into status.
type Snapshot struct {
	// Phase is one of the api/v1alpha1 phases a connection can be in:
	// Pending, Connecting, Ready, Idle, Reconnecting or Failed.
	Phase v1alpha1.Phase
	// Reason is the api/v1alpha1 reason of the phase, as the Ready
	// condition carries it; Message says why the phase is Failed.
	Reason  string
	Message string
	// Generation numbers the latest connection generation started.
	Generation int64
	// FailedAttempts counts the consecutive failed attempts of the current
	// outage, at most MaxAttempts (see outage.go for what counts).
	FailedAttempts int
	// Attempt numbers the scheduled or running retry within its outage,
	// counting the failed attempts before it: FailedAttempts+1 once a retry
	// is scheduled; 0 while connected and before the first retry.
	Attempt     int
	MaxAttempts int
	// RetryDelay and NextRetry describe the scheduled attempt.
	RetryDelay time.Duration
	NextRetry  time.Time
	// Tools are the server's tools as published in the registry.
	Tools         []registry.Tool
	ServerInfo    *ServerInfo
	LastError     *StageError
	LastConnected time.Time
	// Runtime is where a stdio server runs (Local or Pod); empty for HTTP.
	Runtime v1alpha1.Runtime
	// PodName is the Pod of the current generation (Pod runtime), or the
	// Pod the supervisor waits for; empty while there is none.
	PodName string
	// SyncConflict is set while the latest fetched tool set could not be
	// published because a public name is held by another server or the
	// namespace's tool budget would be passed; SyncReason says which, as
	// the v1alpha1 reason (ToolNameConflict or ToolBudgetExceeded).
	SyncConflict string
	SyncReason   string
}

// ServerInfo is what the server said about itself.
type ServerInfo struct {
	Name            string
	Version         string
	ProtocolVersion string
}

func (s Snapshot) clone() Snapshot {
	s.Tools = slices.Clone(s.Tools)
	if s.ServerInfo != nil {
		si := *s.ServerInfo
		s.ServerInfo = &si
	}
	if s.LastError != nil {
		le := *s.LastError
		s.LastError = &le
	}
	return s
}

// maxInfoLen bounds what a server may say about itself in our status.
const maxInfoLen = 256

// Truncate cuts s to at most n bytes without splitting a character; a cut
// string ends in "...". What a server says reaches status, events and error
// messages through it, so that a server cannot bloat them.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
