package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Minting sealed ids for new sessions, and taking up a session whose id
// this process does not know. The SDK's stateful handler keeps the sessions
// (with its streams, GET streams and list_changed); the gateway only
// chooses the id of each session it opens (ServerOptions.GetSessionID) and,
// for an id that opens, replays the session's handshake from the sealed
// state through the same handler before the agent's request, so that a
// session taken up is served exactly as one opened here. See
// docs/design.md, "Sessions on every replica".

// mint hands the id chosen for a request that opens a session to the SDK's
// GetSessionID, which takes no arguments: the lock is held from stage until
// GetSessionID takes the id, or until the request ends without it (the SDK
// refused the request before opening a session).
type mint struct {
	mu   sync.Mutex
	next *staged
}

type staged struct {
	id    string
	taken atomic.Bool
}

func (m *mint) stage(id string) *staged {
	m.mu.Lock()
	s := &staged{id: id}
	m.next = s
	return s
}

// take is the view's GetSessionID. It runs in the goroutine that staged the
// id (within the SDK handler's ServeHTTP), so the lock is held.
func (m *mint) take() string {
	s := m.next
	if s == nil {
		return rand.Text() // not reached: every opening request is staged
	}
	m.next = nil
	s.taken.Store(true)
	m.mu.Unlock()
	return s.id
}

func (m *mint) unstage(s *staged) {
	if s.taken.CompareAndSwap(false, true) {
		m.next = nil
		m.mu.Unlock()
	}
}

// errNoKey: the ring has no key yet, so no session can be opened.
var errNoKey = errors.New("the session keys are not loaded yet")

// newSessionID returns the id of the session r opens: sealed with the
// client's initialize params when r is an initialize; a random one (the SDK
// closes a session that did not initialize at the end of its request)
// otherwise.
func (v *view) newSessionID(r *http.Request) (string, error) {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body)) // an error is the SDK's to answer
	var msg struct {
		Method string
		Params *mcp.InitializeParams
	}
	if err != nil || json.Unmarshal(body, &msg) != nil || msg.Method != "initialize" || msg.Params == nil {
		return rand.Text(), nil
	}
	st := &sealedState{Identity: v.identity, Namespace: v.e.ns, IssuedAt: v.e.sealer.now().Unix()}
	for _, full := range []bool{true, false} {
		st.Params = sealedParams(msg.Params, full)
		if id, ok := v.e.sealer.seal(st); ok {
			return id, nil
		}
	}
	if _, _, ok := v.e.sealer.keys.Current(); !ok {
		return "", errNoKey
	}
	// Does not fit even cut (a client's capabilities the spec does not
	// bound): a session of this process only.
	v.e.log.V(1).Info("agent session not sealed: its initialize params are too large")
	return rand.Text(), nil
}

// serveOpening serves r, which opens a session, under the id newSessionID
// chose.
func (v *view) serveOpening(w http.ResponseWriter, r *http.Request) {
	id, err := v.newSessionID(r)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s := v.mint.stage(id)
	defer v.mint.unstage(s)
	v.sessions.ServeHTTP(w, r)
}

// takeUp makes sid a session of this view when it is not one yet and it
// opens for the caller: its key is honoured, it was sealed for this
// namespace and this identity, it is not expired, and this gateway did not
// end it. It returns false when it answered r itself (a budget's 429);
// otherwise the SDK serves r, and answers 404 if sid is still unknown.
func (v *view) takeUp(w http.ResponseWriter, r *http.Request, sid string) bool {
	if v.e.sealer.ended.has(sid) || v.served(sid) {
		return true
	}
	st, ok := v.e.sealer.open(sid, v.e.ns)
	if !ok || !bytes.Equal(st.Identity, v.identity) {
		return true
	}
	v.takingUp.Lock()
	defer v.takingUp.Unlock()
	if v.hasSession(sid) { // taken up by a concurrent request meanwhile
		return true
	}
	release, ok := v.admitSession(w, r)
	if !ok {
		return false
	}
	defer release()
	v.replaying.Store(sid, struct{}{})
	defer v.replaying.Delete(sid)
	if err := v.replay(r.Context(), sid, st.Params); err != nil {
		v.e.log.Error(err, "agent session not taken up")
	}
	if v.e.sealer.ended.has(sid) {
		// Another replica ended it while it was replayed here, after the
		// check above and before EndedElsewhere could see it.
		v.closeSessions(func(id string) bool { return id == sid })
	}
	return true
}

// served: sid is a session of this view that takes requests. The SDK lists
// a session from its Connect, before its handler knows the id (a request
// then gets 404) and before the replayed handshake ends; a request that
// sees a session still replaying waits for takingUp. Sessions() is read
// first: the id is in replaying before the replay's Connect and leaves it
// after the handshake.
func (v *view) served(sid string) bool {
	if !v.hasSession(sid) {
		return false
	}
	_, replaying := v.replaying.Load(sid)
	return !replaying
}

// replay runs a session's handshake through the SDK's handler, under sid,
// with the client's initialize params: the SDK then holds a session as the
// one the client opened, with the same negotiated version and
// capabilities. The answers go nowhere: the client had them when it opened
// the session.
func (v *view) replay(ctx context.Context, sid string, params *mcp.InitializeParams) error {
	init, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
	if err != nil {
		return err
	}
	s := v.mint.stage(sid)
	code := v.replayPOST(ctx, "", init)
	v.mint.unstage(s)
	if code != http.StatusOK || !v.hasSession(sid) {
		return fmt.Errorf("the replayed initialize was answered %d", code)
	}
	if code := v.replayPOST(ctx, sid, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); code != http.StatusAccepted {
		return fmt.Errorf("the replayed notifications/initialized was answered %d", code)
	}
	return nil
}

func (v *view) replayPOST(ctx context.Context, sid string, body []byte) int {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		r.Header.Set("Mcp-Session-Id", sid)
	}
	w := &discardWriter{header: http.Header{}}
	v.sessions.ServeHTTP(w, r)
	return w.code()
}

// discardWriter is the ResponseWriter of a replayed request.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

func (w *discardWriter) Flush() { w.WriteHeader(http.StatusOK) }

func (w *discardWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
