package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// A failure with a long text is cut, and still answers errors.Is and
// errors.As for what the supervisor and its callers ask of failures; a
// short one is kept as it is.
func TestBoundError(t *testing.T) {
	long := strings.Repeat("é", maxErrorText) // 2 bytes each: a cut inside a character
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"a JSON-RPC error of the server", fmt.Errorf("calling %q: %w", "tools/list", &jsonrpc.Error{Code: -32000, Message: long}),
			func(err error) bool {
				wire, ok := errors.AsType[*jsonrpc.Error](err)
				return ok && wire.Code == -32000 && len(wire.Message) <= maxInfoLen
			}},
		{"a lost session", fmt.Errorf("%s: %w", long, mcp.ErrSessionMissing), func(err error) bool { return isSessionLost(err) }},
		{"a cut stream", fmt.Errorf("%s: %w", long, io.ErrUnexpectedEOF), func(err error) bool { return isSessionLost(err) }},
		{"the caller's deadline", fmt.Errorf("%s: %w", long, context.DeadlineExceeded),
			func(err error) bool { return errors.Is(err, context.DeadlineExceeded) && !isTransportFailure(err) }},
		{"a suspend", fmt.Errorf("%w: %s", errSuspended, long), func(err error) bool { return errors.Is(err, errSuspended) }},
		{"the close barrier", fmt.Errorf("%w: %s", ErrCloseTimeout, long), func(err error) bool { return errors.Is(err, ErrCloseTimeout) }},
		{"the result budget", fmt.Errorf("%w: %s", registry.ErrResultBudget, long), func(err error) bool { return errors.Is(err, registry.ErrResultBudget) }},
		{"the connection budget", fmt.Errorf("%s: %w", long, errDeadline{budget: 5}), IsDeadline},
		{"a Pod that never got Ready", errPodDeadline{reason: long}, func(err error) bool {
			d, ok := errors.AsType[errPodDeadline](err)
			return ok && len(d.reason) <= maxInfoLen
		}},
		{"a wake that timed out", errWakeTimeout{why: long}, func(err error) bool {
			w, ok := errors.AsType[errWakeTimeout](err)
			return ok && len(w.why) <= maxInfoLen && errors.Is(err, context.DeadlineExceeded)
		}},
		{"a tool budget", fmt.Errorf("%s: %w", long, &registry.ToolBudgetError{Max: 1}), func(err error) bool {
			_, ok := errors.AsType[*registry.ToolBudgetError](err)
			return ok
		}},
		{"a name conflict", &registry.ConflictError{RawName: long, PublicName: "mcp__a__b"}, func(err error) bool {
			c, ok := errors.AsType[*registry.ConflictError](err)
			return ok && c.PublicName == "mcp__a__b" && len(c.RawName) <= maxInfoLen
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundError(tc.err)
			if text := got.Error(); len(text) > maxErrorText || !utf8.ValidString(text) {
				t.Errorf("text of %d bytes (valid UTF-8: %v), want at most %d", len(text), utf8.ValidString(text), maxErrorText)
			}
			if !tc.check(got) {
				t.Errorf("the cut error no longer answers as the original: %T", got)
			}
			// Nothing it keeps holds the long text.
			if cut, ok := got.(*cutError); ok {
				for _, k := range cut.is {
					if len(k.Error()) > maxErrorText {
						t.Errorf("keeps %T with %d bytes of text", k, len(k.Error()))
					}
				}
			}
		})
	}
	short := fmt.Errorf("calling %q: %w", "ping", &jsonrpc.Error{Code: -32601, Message: "method not found"})
	if got := boundError(short); got != short {
		t.Errorf("a short error was replaced: %v", got)
	}
	if boundError(nil) != nil {
		t.Error("boundError(nil) is not nil")
	}
}

// A hostile upstream that answers with a 1 MiB error message has the
// manager keep and log a few KiB of it, not all of it, at every attempt.
func TestAnUpstreamsLongErrorIsCutInStatusAndLogs(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	huge := strings.Repeat("x", 1<<20)
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/list" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"%s"}}`+"\n", r.RPCID, huge)
		return true
	})
	var mu sync.Mutex
	var lines, longest int
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines, longest = lines+1, max(longest, len(args))
	}, funcr.Options{})
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Log = log })
	sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.LastError != nil })
	if n := len(sn.LastError.Message()); n > maxErrorText {
		t.Errorf("lastError keeps %d bytes of the server's message, want at most %d", n, maxErrorText)
	}
	if !strings.HasPrefix(sn.LastError.Stage, "tools-list") || !strings.Contains(sn.LastError.Message(), "xxxx") {
		t.Errorf("lastError = %q at stage %q, want the server's words, cut, at tools-list", Truncate(sn.LastError.Message(), 80), sn.LastError.Stage)
	}
	mu.Lock()
	defer mu.Unlock()
	if lines == 0 || longest > maxErrorText+1024 {
		t.Errorf("%d log lines, the longest %d bytes: want the attempt logged in at most %d", lines, longest, maxErrorText+1024)
	}
}

// A server whose initialize answer is larger than a connection keeps
// (instructions of 2 MiB) is refused at the initialize stage, with the
// reason, instead of having the session hold it for its life.
func TestAnOversizedInitializeAnswerIsRefused(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{Protocol: "2025-11-25"}))
	huge := strings.Repeat("y", 2<<20)
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "initialize" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},`+
			`"serverInfo":{"name":"big","version":"1"},"instructions":"%s"}}`+"\n", r.RPCID, huge)
		return true
	})
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.LastError != nil })
	if sn.LastError.Stage != StageInitialize || !strings.Contains(sn.LastError.Message(), "initialize answer is") {
		t.Fatalf("lastError = %q at stage %q, want the initialize answer refused for its size", sn.LastError.Message(), sn.LastError.Stage)
	}
	if sn.Phase == "Ready" {
		t.Fatal("the server is Ready on an oversized initialize answer")
	}
}

// A server whose answer has more than 64 KiB of headers (a session id of
// 100 KiB, which the SDK would keep and send back with every request)
// fails the attempt at initialize, saying why, over HTTP/1.1 and HTTP/2.
func TestAnOversizedResponseHeaderIsRefused(t *testing.T) {
	httpForEachWire(t, func(t *testing.T, serve httpServeFunc) {
		up, opts := serve(t, httpFixture(t, fixture.Options{Protocol: "2025-11-25"}))
		up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
			if r.RPCMethod != "initialize" {
				return false
			}
			w.Header().Set("Mcp-Session-Id", strings.Repeat("s", 100<<10))
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},`+
				`"serverInfo":{"name":"big","version":"1"}}}`+"\n", r.RPCID)
			return true
		})
		s, _ := startSupervisor(t, httpPolicy(up.URL()), opts...)
		sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.LastError != nil })
		want := "response headers exceeded" // net/http's own words over HTTP/1.1
		if up.srv.TLS != nil {
			want = "more than the 64 KiB of headers an answer may have"
		}
		if sn.LastError.Stage != StageInitialize || !strings.Contains(sn.LastError.Message(), want) {
			t.Fatalf("lastError = %q at stage %q, want the answer's headers refused for their size (%q)", Truncate(sn.LastError.Message(), 300), sn.LastError.Stage, want)
		}
	})
}

// The session ids the SDK writes into its errors are left out of what the
// supervisor keeps and reports (status, logs, spans), and the error still
// answers as it did.
func TestBoundErrorLeavesOutSessionIDs(t *testing.T) {
	const id = "d3b07384d113edec49eaa6238ad5ff00"
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a session the server forgot", fmt.Errorf("calling %q: failed to connect (session ID: %v): %w", "tools/call", id, mcp.ErrSessionMissing),
			`calling "tools/call": failed to connect (session ID: redacted): session not found`},
		{"the session's stream", fmt.Errorf("standalone SSE request failed (session ID: %v): %v", id, io.ErrUnexpectedEOF),
			"standalone SSE request failed (session ID: redacted): unexpected EOF"},
		{"two ids", fmt.Errorf("mismatching session IDs %q and %q", id, `x"`+id),
			"mismatching session IDs redacted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundError(tc.err)
			if text := got.Error(); text != tc.want {
				t.Errorf("text %q, want %q", text, tc.want)
			}
			if errors.Is(tc.err, mcp.ErrSessionMissing) != errors.Is(got, mcp.ErrSessionMissing) {
				t.Error("no longer answers errors.Is(ErrSessionMissing) as it did")
			}
		})
	}
}
