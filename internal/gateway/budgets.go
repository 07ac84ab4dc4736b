package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbridge/operator/internal/registry"
)

// Budgets bound what one tenant can hold of the gateway, so that a loop of
// initialize requests, a flood of calls or a hostile upstream's large and
// slow results cannot take the manager from the other tenants. Beyond a
// budget the request is answered at once, never queued. Zero fields mean
// the defaults. See docs/design.md, "Budgets".
type Budgets struct {
	// SessionsPerIdentity: live 2025-11-25 sessions of one identity in one
	// namespace; one more initialize gets HTTP 429 with Retry-After.
	SessionsPerIdentity int
	// SessionsPerNamespace: the same, all identities of one namespace
	// together, so that a tenant's many identities do not multiply the
	// first budget.
	SessionsPerNamespace int
	// CallsPerIdentity and CallsPerNamespace: tools/call in flight; one
	// more gets a JSON-RPC error naming the limit.
	CallsPerIdentity, CallsPerNamespace int
	// ResultBytesPerNamespace: bytes of tool results read from upstreams
	// and not yet written to their agents, and of the arguments of the
	// calls in flight, all calls of a namespace together; a call that would
	// pass it fails with a JSON-RPC error naming the limit.
	ResultBytesPerNamespace int64
}

// Defaults of the budgets (docs/design.md, "Budgets" and "Limits").
const (
	DefaultMaxSessionsPerIdentity     = 64
	DefaultMaxSessionsPerNamespace    = 1024
	DefaultMaxCallsPerIdentity        = 32
	DefaultMaxCallsPerNamespace       = 256
	DefaultMaxResultBytesPerNamespace = 64 << 20
)

// The flags that set the budgets; refusals name them, so that whoever reads
// one knows what to raise.
const (
	FlagMaxSessionsPerIdentity     = "--gateway-max-sessions-per-identity"
	FlagMaxSessionsPerNamespace    = "--gateway-max-sessions-per-namespace"
	FlagMaxCallsPerIdentity        = "--gateway-max-inflight-calls-per-identity"
	FlagMaxCallsPerNamespace       = "--gateway-max-inflight-calls-per-namespace"
	FlagMaxResultBytesPerNamespace = "--gateway-max-result-bytes-per-namespace"
)

// The limit label of mcpbridge_gateway_refusals_total.
const (
	limitSessions    = "sessions_per_identity"
	limitSessionsNS  = "sessions_per_namespace"
	limitCallsIdent  = "calls_per_identity"
	limitCallsNS     = "calls_per_namespace"
	limitResultBytes = "result_bytes_per_namespace"
	// limitLargeBodies: a body over 64 KiB refused while the namespace's
	// large bodies are paced (pacing.go).
	limitLargeBodies = "large_bodies_per_namespace"
)

func (b Budgets) withDefaults() Budgets {
	return Budgets{
		SessionsPerIdentity:     cmp.Or(b.SessionsPerIdentity, DefaultMaxSessionsPerIdentity),
		SessionsPerNamespace:    cmp.Or(b.SessionsPerNamespace, DefaultMaxSessionsPerNamespace),
		CallsPerIdentity:        cmp.Or(b.CallsPerIdentity, DefaultMaxCallsPerIdentity),
		CallsPerNamespace:       cmp.Or(b.CallsPerNamespace, DefaultMaxCallsPerNamespace),
		ResultBytesPerNamespace: cmp.Or(b.ResultBytesPerNamespace, DefaultMaxResultBytesPerNamespace),
	}
}

// sessionRetryAfter is what a caller over its session budget is told to
// wait: sessions end when their agents delete them or go idle, not soon.
const sessionRetryAfter = "30"

// codeBudget is the JSON-RPC error code of a call refused by a budget, in
// the range JSON-RPC leaves to servers.
const codeBudget = -32029

// admitSession answers 429 and returns false when r would open a session
// beyond the identity's budget or the namespace's; otherwise the caller
// must call the returned release once the SDK has served r (and registered
// the session it opened). Both counts are of this replica's sessions and
// of the initialize requests it is serving.
func (v *view) admitSession(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	v.opening.Lock()
	defer v.opening.Unlock()
	n := v.openingNow + sessionsOf(v)
	if n >= v.e.budgets.SessionsPerIdentity {
		v.refuseSession(w, limitSessions, fmt.Sprintf("this identity has %d live sessions in namespace %s, its budget (%s)",
			n, v.e.ns, FlagMaxSessionsPerIdentity))
		return nil, false
	}
	if !v.e.admitSession() {
		v.refuseSession(w, limitSessionsNS, fmt.Sprintf("namespace %s has %d live sessions, its budget (%s)",
			v.e.ns, v.e.budgets.SessionsPerNamespace, FlagMaxSessionsPerNamespace))
		return nil, false
	}
	v.openingNow++
	return func() {
		v.opening.Lock()
		v.openingNow--
		v.opening.Unlock()
		v.e.releaseSession()
	}, true
}

// admitSession takes a place for one session being opened in the
// namespace's budget, if there is one. A view's opening lock may be held
// here; the endpoint's is never held while one is taken.
func (e *endpoint) admitSession() bool {
	e.opening.Lock()
	defer e.opening.Unlock()
	n := e.openingNow
	for _, v := range e.allViews() {
		n += sessionsOf(v)
	}
	if n >= e.budgets.SessionsPerNamespace {
		return false
	}
	e.openingNow++
	return true
}

func (e *endpoint) releaseSession() {
	e.opening.Lock()
	e.openingNow--
	e.opening.Unlock()
}

func sessionsOf(v *view) int {
	n := 0
	for range v.server.Sessions() {
		n++
	}
	return n
}

// refuseSession answers an initialize a session budget refused, and counts
// it.
func (v *view) refuseSession(w http.ResponseWriter, limit, why string) {
	v.refuse(limit)
	refused("too_many_sessions")
	w.Header().Set("Retry-After", sessionRetryAfter)
	http.Error(w, "too many sessions: "+why+"; end one with DELETE or retry later", http.StatusTooManyRequests)
}

// opensSession: the SDK's stateful handler makes a new session for every
// POST without a session id.
func opensSession(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" &&
		r.Header.Get("Mcp-Protocol-Version") < registry.SessionlessProtocol
}

// admitCall takes a place for one tools/call in the identity's and the
// namespace's budgets, or returns the error that refuses it.
func (v *view) admitCall() (release func(), refusal *jsonrpc.Error) {
	b := v.e.budgets
	if n := v.calls.Add(1); n > int64(b.CallsPerIdentity) {
		v.calls.Add(-1)
		v.refuse(limitCallsIdent)
		return nil, budgetError(fmt.Sprintf("too many calls in flight: this identity has %d tools/call in flight in namespace %s, "+
			"its budget (%s); retry when one has ended", b.CallsPerIdentity, v.e.ns, FlagMaxCallsPerIdentity))
	}
	if n := v.e.calls.Add(1); n > int64(b.CallsPerNamespace) {
		v.e.calls.Add(-1)
		v.calls.Add(-1)
		v.refuse(limitCallsNS)
		return nil, budgetError(fmt.Sprintf("too many calls in flight: namespace %s has %d tools/call in flight, "+
			"its budget (%s); retry when one has ended", v.e.ns, b.CallsPerNamespace, FlagMaxCallsPerNamespace))
	}
	return func() {
		v.e.calls.Add(-1)
		v.calls.Add(-1)
	}, nil
}

func budgetError(msg string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: codeBudget, Message: msg}
}

// refuse counts a refusal by a budget of e's namespace.
func (e *endpoint) refuse(limit string) {
	refusals.WithLabelValues(e.ns, limit).Inc()
}

// refuse counts a refusal of one of the identity's requests by a budget.
func (v *view) refuse(limit string) {
	v.budgetRefused.Add(1)
	v.e.refuse(limit)
}

// refuseResultBytes is resultBudgetError for one of the identity's calls.
func (v *view) refuseResultBytes() *jsonrpc.Error {
	v.budgetRefused.Add(1)
	return v.e.resultBudgetError()
}

// resultBytes is a namespace's budget of result bytes held in memory.
type resultBytes struct {
	max  int64
	held atomic.Int64
}

// lease is one call's share of its namespace's result bytes: the bridge
// counts into it what it reads of the result (registry.ResultBytes), and the
// gateway returns all of it once the result is written to the agent.
type lease struct {
	pool *resultBytes
	n    int64
}

// Take counts n more bytes, or reports false and counts nothing when they
// would pass the namespace's budget. One call's lease is used by one
// goroutine at a time.
func (l *lease) Take(n int64) bool {
	if l.pool.held.Add(n) > l.pool.max {
		l.pool.held.Add(-n)
		return false
	}
	l.n += n
	return true
}

// Return gives back n bytes the call no longer holds.
func (l *lease) Return(n int64) {
	n = min(n, l.n)
	l.n -= n
	l.pool.held.Add(-n)
}

// close returns everything the call still holds.
func (l *lease) close() { l.Return(l.n) }

// forwardedLease is the lease of a call another replica forwarded here
// (Gateway.ResultBytes): no view counts its refusals, so it does.
type forwardedLease struct {
	lease
	e *endpoint
}

func (l *forwardedLease) Take(n int64) bool {
	if l.lease.Take(n) {
		return true
	}
	l.e.refuse(limitResultBytes)
	return false
}

// resultBudgetError is the JSON-RPC error of a call whose result would
// pass the namespace's budget of result bytes.
func (e *endpoint) resultBudgetError() *jsonrpc.Error {
	e.refuse(limitResultBytes)
	return budgetError(fmt.Sprintf("the call was not served: the arguments and results of the calls in namespace %s would pass "+
		"its budget of %s held in memory (%s); retry later", e.ns, formatBytes(e.results.max), FlagMaxResultBytesPerNamespace))
}

func formatBytes(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// writeError answers id with a JSON-RPC error.
func writeError(w http.ResponseWriter, sid string, id json.RawMessage, e *jsonrpc.Error) {
	body, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, e})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if sid != "" {
		h.Set("Mcp-Session-Id", sid)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
