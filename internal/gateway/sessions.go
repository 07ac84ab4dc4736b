package gateway

import (
	"sync"
	"time"
)

// Idle sessions are ended by the gateway, not by the SDK: the SDK counts
// only the requests it handles itself, and a session whose calls all take
// the fast path would look idle to it while in use.

// DefaultSessionIdleTimeout ends sessions whose agent went away without a
// DELETE.
const DefaultSessionIdleTimeout = 30 * time.Minute

// activity remembers when each live session of an endpoint was last used.
type activity struct {
	mu   sync.Mutex
	last map[string]time.Time // session id -> last request
}

// touch records a request of a session the janitor already knows; unknown
// ids are not stored, so callers cannot grow the map.
func (a *activity) touch(sid string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.last[sid]; ok {
		a.last[sid] = now
	}
}

// closeIdle ends the sessions unused for longer than idle. A session seen
// for the first time counts as used now.
func (e *endpoint) closeIdle(now time.Time, idle time.Duration) {
	live := map[string]bool{}
	var stale []string
	e.activity.mu.Lock()
	if e.activity.last == nil {
		e.activity.last = map[string]time.Time{}
	}
	for ss := range e.server.Sessions() {
		id := ss.ID()
		live[id] = true
		last, ok := e.activity.last[id]
		switch {
		case !ok:
			e.activity.last[id] = now
		case now.Sub(last) > idle:
			stale = append(stale, id)
		}
	}
	for id := range e.activity.last {
		if !live[id] {
			delete(e.activity.last, id)
		}
	}
	e.activity.mu.Unlock()
	if len(stale) == 0 {
		return
	}
	for ss := range e.server.Sessions() {
		for _, id := range stale {
			if ss.ID() == id {
				e.log.V(1).Info("ending idle agent session", "idle", idle.String())
				_ = ss.Close()
			}
		}
	}
}
