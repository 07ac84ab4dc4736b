package gateway

import (
	"slices"
	"sync"
	"time"
)

// Idle sessions are ended by the gateway, not by the SDK: the SDK counts
// only the requests it handles itself, and a session whose calls all take
// the fast path would look idle to it while in use.

// DefaultSessionIdleTimeout ends sessions whose agent went away without a
// DELETE.
const DefaultSessionIdleTimeout = 30 * time.Minute

// activity remembers when each live session of an endpoint was last used,
// and which sessions have a POST in flight: like the SDK's own timer, the
// idle time starts when the last POST ends, so a long call keeps its session.
type activity struct {
	mu   sync.Mutex
	last map[string]time.Time // session id -> end of the last request
	busy map[string]int       // session id -> requests in flight
}

// begin marks a request of session sid in flight. Entries of unknown ids
// live only as long as their requests.
func (a *activity) begin(sid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy == nil {
		a.busy = map[string]int{}
	}
	a.busy[sid]++
}

// end records the end of a request; only sessions the janitor knows keep a
// time, so callers cannot grow the map.
func (a *activity) end(sid string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy[sid]--; a.busy[sid] <= 0 {
		delete(a.busy, sid)
	}
	if _, ok := a.last[sid]; ok {
		a.last[sid] = now
	}
}

// closeIdle ends the sessions unused for longer than idle. A session seen
// for the first time counts as used now.
func (v *view) closeIdle(now time.Time, idle time.Duration) {
	live := map[string]bool{}
	var stale []string
	v.activity.mu.Lock()
	if v.activity.last == nil {
		v.activity.last = map[string]time.Time{}
	}
	for ss := range v.server.Sessions() {
		id := ss.ID()
		if id == "" {
			continue // a sessionless request the SDK is serving
		}
		live[id] = true
		last, ok := v.activity.last[id]
		switch {
		case v.activity.busy[id] > 0:
		case !ok:
			v.activity.last[id] = now
		case now.Sub(last) > idle:
			stale = append(stale, id)
		}
	}
	for id := range v.activity.last {
		if !live[id] {
			delete(v.activity.last, id)
		}
	}
	v.activity.mu.Unlock()
	if len(stale) == 0 {
		return
	}
	// Ended here: not taken up again by this replica. Not told to the
	// others: the agent may be using the session on one of them, where it
	// is not idle.
	v.e.sealer.end(false, stale...)
	v.closeSessions(func(id string) bool {
		if slices.Contains(stale, id) {
			v.e.log.V(1).Info("ending idle agent session", "idle", idle.String())
			return true
		}
		return false
	})
}

// closeSessions closes the view's sessions whose id matches.
func (v *view) closeSessions(match func(id string) bool) {
	for ss := range v.server.Sessions() {
		if match(ss.ID()) {
			_ = ss.Close()
		}
	}
}
