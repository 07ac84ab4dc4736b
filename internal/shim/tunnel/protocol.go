package tunnel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// The wire protocol, shared by the server and the client so that it is
// defined in one place. See doc.go for the whole exchange.
const (
	// TunnelPath takes POST: the request body is the child's stdin, the
	// response body its stdout.
	TunnelPath = "/tunnel"
	// HealthzPath and ReadyzPath are the Pod's probes; they need no token.
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"

	// DefaultPort is the shim's port when --listen is not given.
	DefaultPort = 7420

	// HeaderError marks an error answer whose body says why the server
	// process could not be started.
	HeaderError = "Shim-Error"
	ErrorStart  = "start"

	// TrailerExit says how the child ended: "code=N" or "signal=N". Its
	// presence at the end of the response is the shim's confirmation that
	// the child and its process group have been reaped.
	TrailerExit = "Shim-Exit"
	// TrailerReason says what ended the tunnel first (an EndReason).
	TrailerReason = "Shim-Reason"
)

// EndReason is what ended a tunnel first; the child may have been killed
// because of it.
type EndReason string

const (
	// EndExited: the child exited on its own.
	EndExited EndReason = "exited"
	// EndStdinClosed: the client closed the child's stdin (a half-close).
	EndStdinClosed EndReason = "stdin-closed"
	// EndClientGone: the client's connection broke.
	EndClientGone EndReason = "client-gone"
	// EndPipeClosed: the child closed its stdin or stdout but kept running.
	EndPipeClosed EndReason = "pipe-closed"
	// EndPreempted: a newer tunnel took the shim's one slot.
	EndPreempted EndReason = "preempted"
	// EndShutdown: the shim was told to stop (the Pod is being deleted).
	EndShutdown EndReason = "shutdown"
)

// phrase is the reason in words, for error messages.
func (r EndReason) phrase() string {
	switch r {
	case EndStdinClosed:
		return "after the tunnel closed its stdin"
	case EndClientGone:
		return "after the tunnel's client went away"
	case EndPipeClosed:
		return "after it closed its stdin or stdout"
	case EndPreempted:
		return "after a newer tunnel pre-empted this one"
	case EndShutdown:
		return "because the shim is shutting down"
	}
	return ""
}

// ExitError is how a tunnel's child ended, as the shim confirmed once the
// child and its process group had been reaped.
type ExitError struct {
	// Code is the exit code, or -1 when a signal ended the child.
	Code int
	// Signal is the signal that ended the child, or 0.
	Signal syscall.Signal
	// Reason is what ended the tunnel first.
	Reason EndReason
}

func (e *ExitError) Error() string {
	how := "exit status " + strconv.Itoa(e.Code)
	if e.Signal != 0 {
		how = "signal: " + e.Signal.String()
	}
	msg := "the server process exited: " + how
	if p := e.Reason.phrase(); p != "" {
		msg += " (" + p + ")"
	}
	return msg
}

// EncodeExit is the TrailerExit value for a wait status.
func EncodeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal=" + strconv.Itoa(int(ws.Signal()))
	}
	return "code=" + strconv.Itoa(ws.ExitStatus())
}

// decodeExit parses the trailers of a finished tunnel response.
func decodeExit(exit, reason string) (*ExitError, error) {
	key, val, ok := strings.Cut(exit, "=")
	n, err := strconv.Atoi(val)
	if !ok || err != nil {
		return nil, fmt.Errorf("malformed %s trailer %q", TrailerExit, exit)
	}
	e := &ExitError{Code: n, Reason: EndReason(reason)}
	switch key {
	case "code":
	case "signal":
		e.Code, e.Signal = -1, syscall.Signal(n)
	default:
		return nil, fmt.Errorf("malformed %s trailer %q", TrailerExit, exit)
	}
	return e, nil
}

// ErrUnauthorized: the shim refused the token (HTTP 401).
var ErrUnauthorized = errors.New("the shim refused the tunnel: wrong or missing token")

// ErrUnconfirmed: the tunnel ended without the shim's confirmation that
// the child was reaped, so the child may still be running. Errors that
// wrap it say what broke.
var ErrUnconfirmed = errors.New("the tunnel ended before the shim confirmed that the server process was reaped")

// StartError: the shim could not start the command (not found, not
// executable, ...). Message is the shim's explanation.
type StartError struct {
	Message string
}

func (e *StartError) Error() string {
	return "the shim could not start the server process: " + e.Message
}
