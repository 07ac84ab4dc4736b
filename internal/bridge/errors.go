package bridge

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Stages of a connection a failure is attributed to (status lastError.stage).
const (
	StageTransportStart = "transport-start"
	StageInitialize     = "initialize"
	StageToolsCall      = "tools-call"
	StageHealthCheck    = "health-check"
	StageClose          = "close"
	// StageConnection is an established connection lost outside any request
	// of ours: the child exited, the session or its stream ended.
	StageConnection = "connection"
	StageToolsSync  = "tools-sync" // the swap into the registry, after a complete fetch
	// StagePod is the wait for a Pod-runtime server's Pod to be Ready,
	// before the connection budget starts.
	StagePod = "pod"
)

// StageToolsList names the tools/list page a failure happened on, from 1.
func StageToolsList(page int) string { return "tools-list page " + strconv.Itoa(page) }

// StageError is a failure and the stage of the connection it happened in.
type StageError struct {
	Stage string
	Err   error
}

func (e *StageError) Error() string { return e.Err.Error() + " (stage: " + e.Stage + ")" }
func (e *StageError) Unwrap() error { return e.Err }

// Message is the error without the stage, for status lastError.message.
func (e *StageError) Message() string { return e.Err.Error() }

// errDeadline is the connectionTimeoutMs budget running out.
type errDeadline struct{ budget time.Duration }

func (e errDeadline) Error() string {
	return fmt.Sprintf("connection and tool discovery timed out after %dms", e.budget.Milliseconds())
}

// IsDeadline reports whether err is a spent connectionTimeoutMs budget.
func IsDeadline(err error) bool {
	var d errDeadline
	return errors.As(err, &d)
}

// errPodDeadline: the server's Pod was not Ready within its wait's
// connectionTimeoutMs; reason is the kubelet's last word on why.
type errPodDeadline struct {
	budget time.Duration
	reason string
}

func (e errPodDeadline) Error() string {
	return fmt.Sprintf("the server's Pod was not Ready after %dms (connectionTimeoutMs): %s", e.budget.Milliseconds(), e.reason)
}

// ErrCloseTimeout means a generation did not report closed within the close
// barrier; the supervisor stops rather than risk two live children.
var ErrCloseTimeout = errors.New("the previous connection did not close within the close barrier")

// ErrUnavailable is returned by calls to a server that is not connected.
var ErrUnavailable = errors.New("server unavailable")
