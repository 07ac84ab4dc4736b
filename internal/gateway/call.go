package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/jsonspan"
	"github.com/mcpbridge/operator/internal/registry"
)

// The tools/call fast path. A call is most of what agents send, and going
// through the SDK on both sides (decode, handler, re-encode towards the
// agent; encode, decode towards the upstream) cost more CPU than the agent
// and the upstream together. A well-formed call to a served tool is
// therefore forwarded as JSON: the arguments and the result are passed on as
// bytes. Anything the fast path is not sure about (batches, other methods,
// unknown sessions, headers that do not match, tools with x-mcp-header
// parameters) goes to the SDK handler unchanged, which answers it as before.

// message is the part of an agent's JSON-RPC message the fast path reads.
type message struct {
	ID     json.RawMessage
	Method string
	Params struct {
		Name      string
		Arguments json.RawMessage
		Meta      map[string]json.RawMessage
		RequestID json.RawMessage // notifications/cancelled
	}
}

// decodeMessage reads one JSON-RPC message with the SDK's strictness where
// it matters: member names match exactly (encoding/json would match
// "METHOD" too), and an id is a string or a number. The values it keeps
// (id, arguments, _meta's) are slices of body.
//
// Not go-sdk's jsonrpc.DecodeMessage: it turns the id into a float64 or a
// string, so the id cannot be echoed as the agent wrote it, and it decodes
// through a reader that allocates a 32 KiB buffer per message. Not
// json.Unmarshal into maps either, which scanned the body once per level
// and copied every value (BenchmarkFramingDecode*, docs/benchmarks.md):
// the body is validated once and its members read in place (jsonscan.go),
// with the results encoding/json gave. A message nested deeper than
// jsonspan.MaxDepth is not read: the SDK, which then has it, refuses it.
func decodeMessage(body []byte) (*message, bool) {
	if !jsonspan.Valid(body) {
		return nil, false
	}
	top, ok := readObject(body)
	if !ok {
		return nil, false
	}
	m := &message{}
	var jsonrpc, method, params []byte
	for name, value, more := top.next(); more; name, value, more = top.next() {
		switch string(memberName(name)) {
		case "jsonrpc":
			jsonrpc = value
		case "id":
			m.ID = value
		case "method":
			method = value
		case "params":
			params = value
		}
	}
	if string(jsonrpc) != `"2.0"` || (m.ID != nil && !validID(m.ID)) {
		return nil, false
	}
	if method != nil {
		if m.Method, ok = stringValue(method); !ok {
			return nil, false
		}
	}
	if params == nil || params[0] == 'n' { // absent or null
		return m, true
	}
	if !decodeParams(params, m) {
		return nil, false
	}
	return m, true
}

// decodeParams reads the params member of a message into m.
func decodeParams(params []byte, m *message) bool {
	p, ok := readObject(params)
	if !ok {
		return false
	}
	var name, meta []byte
	for key, value, more := p.next(); more; key, value, more = p.next() {
		switch string(memberName(key)) {
		case "name":
			name = value
		case "_meta":
			meta = value
		case "arguments":
			m.Params.Arguments = value
		case "requestId":
			m.Params.RequestID = value
		}
	}
	if name != nil {
		if m.Params.Name, ok = stringValue(name); !ok {
			return false
		}
	}
	if meta == nil || meta[0] == 'n' {
		return true
	}
	o, ok := readObject(meta)
	if !ok {
		return false
	}
	m.Params.Meta = map[string]json.RawMessage{}
	for key, value, more := o.next(); more; key, value, more = o.next() {
		m.Params.Meta[string(memberName(key))] = value
	}
	return true
}

// validID: a string or a plain integer. The SDK rewrites other numbers
// (1.0, 1e2, -0), which the fast path would echo as written; it leaves them
// to the SDK.
func validID(id json.RawMessage) bool {
	if id[0] == '"' {
		return true
	}
	digits := bytes.TrimPrefix(id, []byte("-"))
	if len(digits) == 0 || (digits[0] == '0' && len(id) > 1) {
		return false // "-", "-0", leading zeros
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Keys of the per-request _meta of the sessionless protocol (SEP-2575).
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// What serveFast did with a request.
type fastOutcome int

const (
	answered      fastOutcome = iota // an answer or a refusal was written
	toSDK                            // r's body is left for the SDK
	toSDKDecoding                    // the same, a large body: bodies.done once served
)

// serveFast answers r itself when it is a tools/call (or the cancellation
// of one) it can forward as JSON. Otherwise r's body is left for the SDK
// to read, once what the SDK's decoding of it will hold is taken from
// held, and a large body only when no other of the namespace's is being
// decoded (pacing.go); a request over those bounds it answers itself.
func (v *view) serveFast(w http.ResponseWriter, r *http.Request, held *lease) fastOutcome {
	body, err := readBody(r)
	if errors.Is(err, errRequestBytes) {
		v.refuseRequestBytes(w)
		return answered
	}
	if err != nil {
		// Let the SDK meet the same error (e.g. the size limit) and answer it.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		return toSDK
	}
	if mayBeFast(r) && v.answerFast(w, r, body) {
		return answered
	}
	if !v.holdDecoded(w, held, body) {
		return answered
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) <= pacedBodyBytes {
		return toSDK
	}
	if !v.e.bodies.decode() {
		v.refuseDecoding(w)
		return answered
	}
	v.e.bodies.spent(int64(len(body)))
	return toSDKDecoding
}

// readBody reads r's body into one buffer of its length when it has one
// (Gateway.serve refused it if over the limit), so that a body of
// megabytes is not read into buffers that grow and are thrown away.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, body)
	return body[:n], err
}

// mayBeFast: r may be a message the fast path answers. Its Mcp-Method
// header, when it has one, names its method (the SDK refuses a message
// whose header and body disagree), and a message of another method is not
// decoded twice.
func mayBeFast(r *http.Request) bool {
	switch r.Header.Get("Mcp-Method") {
	case "", "tools/call", "notifications/cancelled":
		return true
	}
	return false
}

// answerFast answers the message in body when the fast path can.
func (v *view) answerFast(w http.ResponseWriter, r *http.Request, body []byte) bool {
	msg, ok := decodeMessage(body)
	switch {
	case !ok:
		return false
	case msg.Method == "tools/call":
		return msg.ID != nil && v.fastCall(w, r, msg)
	case msg.Method == "notifications/cancelled":
		return msg.ID == nil && v.cancelCall(w, r, msg)
	}
	return false
}

// fastCall forwards a tools/call whose session, headers and tool the fast
// path can vouch for.
func (v *view) fastCall(w http.ResponseWriter, r *http.Request, msg *message) bool {
	sid := r.Header.Get("Mcp-Session-Id")
	start := time.Now()
	tool, caller, ok := v.e.registry.Lookup(v.e.ns, msg.Params.Name)
	jc, isJSON := caller.(registry.JSONCaller)
	// A tool that binds a parameter to a header is the SDK's, which checks
	// the headers; one the gateway does not serve is its to refuse.
	if !ok || !isJSON || tool.ParamHeaders || !tool.ObjectInput || !acceptsJSON(r) || !v.validSession(r, msg, sid) {
		return false
	}
	// A refusal, or a review that fails, is the SDK path's to answer.
	if allowed, err := v.e.access.mayUse(r.Context(), grantFrom(r.Context()), v.e.ns, serverOf(tool)); err != nil || !allowed {
		return false
	}
	// What the caller leaves until the answer is written (the drain of the
	// upstream's response) runs last, once the call is answered and its
	// budgets are given back; the agent's next request on this connection
	// is read only after it, and finds the upstream connection pooled.
	var after registry.AfterAnswer
	defer after.Run()
	ctx, done, ok := v.track(r.Context(), sid, msg.ID)
	if !ok {
		return false // the same id is in flight on this session: the SDK decides
	}
	defer done()
	ctx, span := v.startFastMethod(ctx, msg)
	release, refusal := v.admitCall()
	if refusal != nil {
		v.refuseCall(w, sid, msg, tool, refusal, start)
		if span.IsRecording() {
			endMethod(span, r.Header.Get("Mcp-Protocol-Version"), tool, "refused", refusal)
		}
		return true
	}
	defer release()
	// The result is read once, counted against the namespace's bytes, and
	// written from that memory; the bytes are given back once it is sent.
	held := &lease{pool: &v.e.results}
	defer held.close()
	var res json.RawMessage
	var isError bool
	err := registry.ErrResultBudget
	// The arguments are held twice while the call runs: in the agent's
	// request, which holdRequest counted, and in the one posted upstream.
	if held.Take(int64(len(msg.Params.Arguments))) {
		cctx := registry.WithAfterAnswer(registry.WithResultBytes(ctx, held), &after)
		res, isError, err = jc.CallToolJSON(cctx, tool.RawName, msg.Params.Arguments)
	}
	if errors.Is(err, registry.ErrResultBudget) {
		refusal = v.refuseResultBytes()
		v.refuseCall(w, sid, msg, tool, refusal, start)
		if span.IsRecording() {
			endMethod(span, r.Header.Get("Mcp-Protocol-Version"), tool, "refused", refusal)
		}
		return true
	}
	if err != nil {
		// As in the SDK path: a failed call is a tool error with the reason.
		res, isError = errorResultJSON(err.Error()), true
	}
	outcome := "success"
	if isError {
		outcome = "tool_error"
	}
	d := time.Since(start)
	countCall(outcome, d)
	writeResult(w, sid, msg.ID, res)
	v.audit(msg.Params.Name, tool, outcome, d)
	if span.IsRecording() {
		endMethod(span, r.Header.Get("Mcp-Protocol-Version"), tool, outcome, err)
	}
	return true
}

// validSession: a stateful call names a session of this view; a
// sessionless one carries the headers and _meta the SDK would insist on.
func (v *view) validSession(r *http.Request, msg *message, sid string) bool {
	version := r.Header.Get("Mcp-Protocol-Version")
	if version != "" && !slices.Contains(supportedVersions, version) {
		return false
	}
	if version < registry.SessionlessProtocol {
		return sid != "" && v.hasSession(sid)
	}
	metaVersion, ok := stringValue(msg.Params.Meta[metaProtocolVersion])
	if !ok {
		return false
	}
	caps := bytes.TrimSpace(msg.Params.Meta[metaClientCapabilities])
	return sid == "" && metaVersion == version && bytes.HasPrefix(caps, []byte("{")) &&
		r.Header.Get("Mcp-Method") == msg.Method && r.Header.Get("Mcp-Name") == msg.Params.Name
}

// supportedVersions are the versions the SDK handler would accept.
var supportedVersions = mcp.SupportedProtocolVersions()

// acceptsJSON: the agent takes an application/json answer.
func acceptsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "application/json") || strings.Contains(v, "*/*") {
			return true
		}
	}
	return false
}

// inflight holds the fast calls of stateful sessions, so that the agent's
// notifications/cancelled reaches them: the SDK does not know about them.
type inflight struct {
	mu    sync.Mutex
	calls map[string]context.CancelFunc // session id + NUL + request id
}

func (v *view) track(ctx context.Context, sid string, id json.RawMessage) (context.Context, func(), bool) {
	if sid == "" {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, true
	}
	key := sid + "\x00" + string(id)
	v.inflight.mu.Lock()
	if _, busy := v.inflight.calls[key]; busy {
		v.inflight.mu.Unlock()
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	if v.inflight.calls == nil {
		v.inflight.calls = map[string]context.CancelFunc{}
	}
	v.inflight.calls[key] = cancel
	v.inflight.mu.Unlock()
	return ctx, func() {
		v.inflight.mu.Lock()
		delete(v.inflight.calls, key)
		v.inflight.mu.Unlock()
		cancel()
	}, true
}

// cancelCall cancels a fast call of the agent's session; a cancellation of
// anything else goes to the SDK.
func (v *view) cancelCall(w http.ResponseWriter, r *http.Request, msg *message) bool {
	sid := r.Header.Get("Mcp-Session-Id")
	if sid == "" || len(msg.Params.RequestID) == 0 {
		return false
	}
	key := sid + "\x00" + string(bytes.TrimSpace(msg.Params.RequestID))
	v.inflight.mu.Lock()
	cancel := v.inflight.calls[key]
	v.inflight.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	requests.WithLabelValues(msg.Method, "success").Inc()
	w.WriteHeader(http.StatusAccepted)
	return true
}

// writeResult answers id with result, as one JSON response. The id and the
// result are bytes already valid as JSON, so they are appended as they are;
// jsonrpc.EncodeMessage would re-encode both (BenchmarkFramingEncode*).
func writeResult(w http.ResponseWriter, sid string, id, result json.RawMessage) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if sid != "" {
		h.Set("Mcp-Session-Id", sid)
	}
	// The result is written from the memory it was read into, never
	// copied: it may be 16 MiB (docs/design.md, "Budgets"). Small answers
	// go out in one write.
	head := make([]byte, 0, len(id)+40+min(len(result), smallResult))
	head = append(head, `{"jsonrpc":"2.0","id":`...)
	head = append(head, id...)
	head = append(head, `,"result":`...)
	tail := result
	if len(result) <= smallResult {
		head, tail = append(append(head, result...), '}', '\n'), nil
	}
	// The whole answer leaves now, with its length: the agent has it while
	// the gateway counts, audits and ends the call's spans.
	n := len(head)
	if tail != nil {
		n += len(tail) + 2
	}
	h.Set("Content-Length", strconv.Itoa(n))
	_, _ = w.Write(head)
	if tail != nil {
		// A piece a write: one write of 16 MiB copies megabytes into the
		// socket in one system call that holds a core for milliseconds
		// (docs/design.md, "Budgets").
		for len(tail) > 0 {
			k := min(len(tail), writeStep)
			if _, err := w.Write(tail[:k]); err != nil {
				break
			}
			tail = tail[k:]
		}
		_, _ = w.Write([]byte("}\n"))
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// smallResult: results up to this size are copied into the answer's one
// write; larger ones are written where they are, writeStep at a time.
const (
	smallResult = 32 << 10
	writeStep   = 256 << 10
)

// refuseCall answers a call a budget refused, at once, and counts and
// audits it.
func (v *view) refuseCall(w http.ResponseWriter, sid string, msg *message, tool registry.Tool, refusal *jsonrpc.Error, start time.Time) {
	d := time.Since(start)
	countCall("refused", d)
	writeError(w, sid, msg.ID, refusal)
	v.audit(msg.Params.Name, tool, "refused", d)
}

func errorResultJSON(msg string) json.RawMessage {
	b, _ := json.Marshal(errorResult(msg))
	return b
}
