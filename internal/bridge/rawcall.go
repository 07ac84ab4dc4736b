package bridge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/jsonspan"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// CallToolJSON is CallTool with JSON in and out. Over Streamable HTTP it
// posts the request itself and hands back the result's bytes as the server
// sent them; the SDK would decode and re-encode both, which costs more than
// the rest of a proxied call. Over stdio it goes through the SDK session.
func (s *Supervisor) CallToolJSON(ctx context.Context, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	if args != nil && !jsonspan.Valid(args) {
		return nil, false, newStageError(StageToolsCall, fmt.Errorf("the arguments are not valid JSON nested at most %d deep", jsonspan.MaxDepth))
	}
	if s.p.HTTP == nil { // stdio: the SDK's session, and the wake of a sleeping server
		return s.callToolAsJSON(ctx, rawName, args)
	}
	start := time.Now()
	deadline := start.Add(s.p.ToolCallTimeout)
	g, err := s.callable(ctx, rawName, deadline)
	var hl *httpLink
	if err == nil {
		if hl, _ = g.link.(*httpLink); hl == nil {
			s.release()
		}
	}
	if hl == nil { // not over HTTP, or no call at all: CallTool says why
		return s.callToolAsJSON(ctx, rawName, args)
	}
	defer s.release()
	ctx, span := s.startCall(ctx, rawName)
	cctx, cancel := g.callContext(ctx, deadline)
	defer cancel()
	res, isError, err := g.postCall(withCallSpan(cctx), hl, rawName, args)
	if err != nil {
		err = s.callFailed(ctx, cctx, g, err)
	}
	outcome := callOutcome(nil, err)
	if err == nil && isError {
		outcome = "tool_error"
	}
	s.observer.ToolCall(outcome, time.Since(start))
	endCall(span, g, outcome, err)
	return res, isError, err
}

// callToolAsJSON is the SDK path with the JSON conversions at both ends.
func (s *Supervisor) callToolAsJSON(ctx context.Context, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	var a any
	if len(args) > 0 {
		a = args
	}
	res, err := s.CallTool(ctx, rawName, a)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(res)
	if rb := registry.ResultBytesFrom(ctx); err == nil && rb != nil && !rb.Take(int64(len(b))) {
		// The SDK has read the result already; what counts is that the
		// caller does not go on to hold it.
		return nil, false, newStageError(StageToolsCall, registry.ErrResultBudget)
	}
	return b, res.IsError, err
}

// callRequest is a tools/call on the wire. The id is a string so that it can
// never collide with the SDK's numeric ids on the same session. Encoded in
// one pass: jsonrpc.EncodeMessage takes params already encoded and encodes
// them again, twice the bytes (BenchmarkFramingEncodeCall*).
type callRequest struct {
	JSONRPC string     `json:"jsonrpc"`
	ID      string     `json:"id"`
	Method  string     `json:"method"`
	Params  callParams `json:"params"`
}

type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      *callMeta       `json:"_meta,omitempty"`
}

// callMeta is a call's _meta: the client's identity for a 2026-07-28
// server, and the W3C trace context of the call's span when tracing is on.
type callMeta struct {
	*requestMeta
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// requestMeta is what a 2026-07-28 server needs on every request (SEP-2575):
// the same values the SDK sends for this client.
type requestMeta struct {
	ProtocolVersion    string              `json:"io.modelcontextprotocol/protocolVersion"`
	ClientInfo         *mcp.Implementation `json:"io.modelcontextprotocol/clientInfo"`
	ClientCapabilities struct{}            `json:"io.modelcontextprotocol/clientCapabilities"`
}

// postCall sends one tools/call over the generation's HTTP client, which
// adds the configured headers and reports a forgotten session, and reads the
// response, JSON or an SSE stream, up to the answer with its id.
func (g *generation) postCall(ctx context.Context, hl *httpLink, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	if args == nil {
		args = json.RawMessage("{}")
	}
	res, err := g.request(ctx, hl, "tools/call", rawName, func(id string) ([]byte, error) {
		msg := callRequest{JSONRPC: "2.0", ID: id, Method: "tools/call", Params: callParams{Name: rawName, Arguments: args}}
		version := g.sess.InitializeResult().ProtocolVersion
		if version >= registry.SessionlessProtocol {
			msg.Params.Meta = &callMeta{requestMeta: &requestMeta{ProtocolVersion: version, ClientInfo: clientImpl}}
		}
		if parent, state := tracing.Fields(ctx); parent != "" {
			if msg.Params.Meta == nil {
				msg.Params.Meta = &callMeta{}
			}
			msg.Params.Meta.Traceparent, msg.Params.Meta.Tracestate = parent, state
		}
		return encodeCall(msg)
	})
	if err != nil {
		return nil, false, err
	}
	return res, resultIsError(res), nil
}

// request posts the message body(id) makes for a new id of ours and
// returns the result of its answer; a request its context abandoned is
// cancelled at the server.
func (g *generation) request(ctx context.Context, hl *httpLink, method, name string, body func(id string) ([]byte, error)) (json.RawMessage, error) {
	id := "mcpbridge-" + strconv.FormatInt(hl.ids.Add(1), 10)
	b, err := body(id)
	if err != nil {
		return nil, err
	}
	res, err := g.roundTrip(ctx, hl, id, method, name, b)
	if err != nil {
		return nil, g.abandoned(ctx, hl, id, err)
	}
	return res, nil
}

// counted runs read, which reads answers that no caller's budget counts (a
// tools/list page, a probe's; a call's answer is its caller's to count),
// with what it reads counted in the namespace's budget of bytes being read
// until it returns. A refusal of that budget is named in the error: the
// answer's reader says only that a budget was spent.
func (hl *httpLink) counted(ctx context.Context, read func(context.Context) error) error {
	lease := hl.share.reading.lease()
	defer lease.close()
	err := read(registry.WithResultBytes(ctx, lease))
	if errors.Is(err, registry.ErrResultBudget) {
		return lease.pool.spent()
	}
	return err
}

// listProbe asks for the first tools/list page and drops the answer: the
// SDK's ListTools would keep it in its per-session cache, one more copy of
// every server's tools for as long as the connection lives.
func (g *generation) listProbe(ctx context.Context, hl *httpLink) error {
	return hl.counted(ctx, func(ctx context.Context) error {
		_, err := g.listPage(ctx, hl, "")
		return err
	})
}

// pingProbe posts a ping (up to 2025-11-25) and drops its empty answer.
// The SDK's Ping decodes it through a 32 KiB buffer: garbage from every
// server at every health interval, for an idle fleet the collector's
// main work.
func (g *generation) pingProbe(ctx context.Context, hl *httpLink) error {
	return hl.counted(ctx, func(ctx context.Context) error {
		_, err := g.request(ctx, hl, "ping", "", func(id string) ([]byte, error) {
			return encode(pingRequest{JSONRPC: "2.0", ID: id, Method: "ping"})
		})
		return err
	})
}

// pingRequest is a ping on the wire.
type pingRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
}

// listPage posts a tools/list for the page after cursor and returns its
// result as the server sent it. The SDK's ListTools decodes a page through
// a 32 KiB buffer and then every tool's schema again through another, to
// check x-mcp-header annotations: most of the manager's garbage while a
// fleet connects. See docs/design.md, "Tool sync".
func (g *generation) listPage(ctx context.Context, hl *httpLink, cursor string) (json.RawMessage, error) {
	return g.request(ctx, hl, "tools/list", "", func(id string) ([]byte, error) {
		msg := listRequest{JSONRPC: "2.0", ID: id, Method: "tools/list"}
		msg.Params.Cursor = cursor
		if version := g.sess.InitializeResult().ProtocolVersion; version >= registry.SessionlessProtocol {
			msg.Params.Meta = &requestMeta{ProtocolVersion: version, ClientInfo: clientImpl}
		}
		return encode(msg)
	})
}

// listRequest is a tools/list on the wire.
type listRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
	Params  struct {
		Cursor string       `json:"cursor,omitempty"`
		Meta   *requestMeta `json:"_meta,omitempty"`
	} `json:"params"`
}

// roundTrip posts body, a request with this id, and returns the result of
// its answer. The request ends with ctx until the answer is read; after it,
// the rest of the body is drained so that the connection goes back to the
// pool (a redial per call doubled its cost). The wait for that drain is
// left to ctx's registry.AfterAnswer when it has one, so that the result
// is passed on first (an SSE answer's stream ends after its event).
func (g *generation) roundTrip(ctx context.Context, hl *httpLink, id, method, name string, body []byte) (json.RawMessage, error) {
	rctx, rcancel := context.WithCancel(withoutSniff(context.WithoutCancel(ctx)))
	detach := context.AfterFunc(ctx, rcancel)
	resp, err := g.post(rctx, hl, body, method, name)
	if err != nil {
		detach()
		rcancel()
		return nil, err
	}
	res, err := g.readResponse(rctx, hl, resp, id)
	if detach() && ctx.Err() == nil {
		wait := hl.drain(resp.Body, rcancel)
		if after := registry.AfterAnswerFrom(ctx); after != nil {
			after.Defer(wait)
		} else {
			wait()
		}
	} else {
		resp.Body.Close()
		rcancel()
	}
	return res, withMethod(method, err)
}

func (g *generation) post(ctx context.Context, hl *httpLink, body []byte, method, name string) (*http.Response, error) {
	req, err := g.newPost(ctx, hl, body, method, name)
	if err != nil {
		return nil, err
	}
	return hl.client.Do(req)
}

// readResponse reads the answer to id from resp, following a stream the
// server ended early from its last event id (the SDK resumes the same way).
func (g *generation) readResponse(ctx context.Context, hl *httpLink, resp *http.Response, id string) (json.RawMessage, error) {
	if err := checkCallResponse(resp); err != nil {
		return nil, err
	}
	res, lastID, err := readAnswerFrom(ctx, resp, id, registry.ResultBytesFrom(ctx), g.otherEvents(hl))
	for try := 0; errors.Is(err, errStreamEnded) && lastID != "" && try < maxResumes; try++ {
		res, lastID, err = g.resume(ctx, hl, id, lastID)
	}
	return res, err
}

// otherEvents is what the answer streams of hl do with their other events.
func (g *generation) otherEvents(hl *httpLink) otherEvents {
	return otherEvents{pace: hl.share.pace, handle: g.serverMessage}
}

// serverMessage reads a message the server sent on a request's stream
// before its answer: a list_changed there starts a re-sync, as one on the
// session's own stream does through the SDK; the rest is not forwarded.
func (g *generation) serverMessage(data []byte) {
	if !bytes.Contains(data, listChanged) {
		return
	}
	var msg struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	if json.Unmarshal(data, &msg) == nil && msg.ID == nil && msg.Method == string(listChanged) {
		g.wake(g.resync)
	}
}

var listChanged = []byte("notifications/tools/list_changed")

// maxResumes bounds the reconnections of one answer's stream.
const maxResumes = 3

// resume reopens the stream after event lastID with a GET.
func (g *generation) resume(ctx context.Context, hl *httpLink, id, lastID string) (json.RawMessage, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hl.url, nil)
	if err != nil {
		return nil, lastID, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", g.sess.InitializeResult().ProtocolVersion)
	req.Header.Set("Last-Event-ID", lastID)
	if sid := g.sess.ID(); sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := hl.client.Do(req)
	if err != nil {
		return nil, lastID, err
	}
	defer resp.Body.Close()
	if err := checkCallResponse(resp); err != nil {
		return nil, lastID, err
	}
	res, newID, err := readEvents(ctx, resp.Body, id, registry.ResultBytesFrom(ctx), g.otherEvents(hl))
	return res, cmp.Or(newID, lastID), err
}

// withMethod names the request in a JSON-RPC error of the server, as the
// SDK does.
func withMethod(method string, err error) error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return fmt.Errorf("calling %q: %w", method, err)
	}
	return err
}

// drain reads what follows the answer and then releases the request: what
// has arrived at once, the rest in the background. The caller runs wait,
// which returns once that is done or after drainWait, so that the
// connection is back in the pool before its next call; a server that keeps
// its stream open is drained behind it, for at most drainGrace.
func (l *httpLink) drain(body io.ReadCloser, release context.CancelFunc) (wait func()) {
	// What followed the answer may have arrived (nothing, for an answer
	// of known length): the body is then done with, and a goroutine
	// started for it would wake another thread on every call
	// (docs/design.md, "Tool calls").
	ib := inlineOf(body)
	settled := ib != nil && ib.settle(drainWait)
	drained := make(chan struct{})
	if settled || !l.spawn(func() { drainBody(body, release); close(drained) }) {
		body.Close()
		release()
		return func() {}
	}
	return func() {
		t := time.NewTimer(drainWait)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		}
	}
}

func drainBody(body io.ReadCloser, release context.CancelFunc) {
	t := time.AfterFunc(drainGrace, release)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	t.Stop()
	body.Close()
	release()
}

const (
	drainWait  = 50 * time.Millisecond // what a call waits for its drain
	drainGrace = time.Second           // what a drain waits for the end of the body
	drainLimit = 1 << 20
)

// encode marshals v without HTML escaping, so arguments go out as the agent
// wrote them, up to insignificant whitespace.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeCall is encode(msg), byte for byte, written directly for the usual
// call (plain id, method and tool name; no trace context), whose _meta is
// encoded once per protocol version: encoding/json walked the message by
// reflection on every call. Any other call is encoded by encode. The
// arguments must be valid JSON (CallToolJSON checked them): they are
// compacted as they are copied, by jsonspan.AppendCompact, which does not
// check them again and took a third or less of the time of encoding/json's
// Compact here (docs/benchmarks.md, "JSON-RPC framing").
func encodeCall(msg callRequest) ([]byte, error) {
	args := msg.Params.Arguments
	if len(args) == 0 || !plainString(msg.ID) || !plainString(msg.Method) || !plainString(msg.Params.Name) {
		return encode(msg)
	}
	var meta []byte
	if m := msg.Params.Meta; m != nil {
		if m.Traceparent != "" || m.Tracestate != "" || m.requestMeta == nil || m.ClientInfo != clientImpl {
			return encode(msg)
		}
		var err error
		if meta, err = encodedMeta(m.ProtocolVersion); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, len(msg.ID)+len(msg.Method)+len(msg.Params.Name)+len(args)+len(meta)+80)
	b = append(b, `{"jsonrpc":"2.0","id":"`...)
	b = append(b, msg.ID...)
	b = append(b, `","method":"`...)
	b = append(b, msg.Method...)
	b = append(b, `","params":{"name":"`...)
	b = append(b, msg.Params.Name...)
	b = append(b, `","arguments":`...)
	b = jsonspan.AppendCompact(b, args) // what encoding/json does with a RawMessage
	if meta != nil {
		b = append(b, `,"_meta":`...)
		b = append(b, meta...)
	}
	return append(b, `}}`...), nil
}

// plainString: encoding/json writes s between quotes as it is (printable
// ASCII without quote or backslash; HTML characters are not escaped here).
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// metaByVersion caches the encoded _meta of a call without trace context,
// per protocol version: it is the same for every call of this client.
var metaByVersion sync.Map // version -> []byte

func encodedMeta(version string) ([]byte, error) {
	if b, ok := metaByVersion.Load(version); ok {
		return b.([]byte), nil
	}
	b, err := encode(&callMeta{requestMeta: &requestMeta{ProtocolVersion: version, ClientInfo: clientImpl}})
	if err != nil {
		return nil, err
	}
	metaByVersion.Store(version, b)
	return b, nil
}

// newPost builds a POST of body with the headers the SDK would send; name
// is the tool's, for tools/call.
func (g *generation) newPost(ctx context.Context, hl *httpLink, body []byte, method, name string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hl.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	version := g.sess.InitializeResult().ProtocolVersion
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("Mcp-Protocol-Version", version)
	if id := g.sess.ID(); id != "" {
		h.Set("Mcp-Session-Id", id)
	}
	if version >= registry.SessionlessProtocol {
		h.Set("Mcp-Method", method)
		if name != "" {
			h.Set("Mcp-Name", name)
		}
	}
	return req, nil
}

// resultIsError reads isError without decoding the content, as
// json.Unmarshal into a struct with only that field would: the last member
// named isError in any case, true only if no such member is other than a
// boolean or null. res is valid JSON (matchAnswer found it in a valid
// message), and so it is read in place, in one pass.
func resultIsError(res json.RawMessage) bool {
	isError := false
	for key, value := range members(res) {
		if !fieldIs(key, "isError") {
			continue
		}
		switch string(value) {
		case "true":
			isError = true
		case "false":
			isError = false
		case "null":
		default:
			return false // json.Unmarshal fails
		}
	}
	return isError
}

// abandoned tells the server that a call it may still be running was given
// up (the caller cancelled or the deadline passed), as the SDK does, and
// returns err.
func (g *generation) abandoned(ctx context.Context, hl *httpLink, id string, err error) error {
	if ctx.Err() == nil || g.ctx.Err() != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": id, "reason": ctx.Err().Error()}})
	hl.spawn(func() {
		nctx, cancel := context.WithTimeout(context.Background(), cancelNotifyTimeout)
		defer cancel()
		req, err := g.newPost(nctx, hl, body, "notifications/cancelled", "")
		if err != nil {
			return
		}
		if resp, err := hl.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
		}
	})
	return err
}

// cancelNotifyTimeout bounds the notifications/cancelled of an abandoned call.
const cancelNotifyTimeout = time.Second
