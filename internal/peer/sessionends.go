package peer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// SessionEnds tells the other replicas of the agent sessions ended on this
// one (an agent's DELETE), so that none of them takes such a session up
// again from its sealed id. It passes on what it was told as well, and
// tells a replica that joins later every end it knows of while they could
// still be taken up, so that an end reaches every replica while one that
// knew of it runs. See docs/design.md, "Sessions on every replica".
//
// It is a manager.Runnable on every replica: Ended and Received never
// block; Start sends to each live peer, apart, at once after an end and
// then every SessionEndsConfig.Every, what it has not been told, and tries
// again there until the peer answers or leaves. A slow or unreachable peer
// delays no other.
type SessionEnds struct {
	cfg SessionEndsConfig

	mu      sync.Mutex
	known   []knownEnd           // in the order learnt: seq increases
	have    map[string]time.Time // key -> until, of what known holds
	next    uint64               // seq of the next end learnt
	told    map[string]uint64    // by peerKey: the seq up to which it was told
	sending map[string]bool      // by peerKey: a send is under way
	sends   sync.WaitGroup
	wake    chan struct{}
}

// SessionEndsConfig is what SessionEnds needs.
type SessionEndsConfig struct {
	// Self is this replica's name: not a peer.
	Self string
	// Members lists the live replicas.
	Members func() []Target
	// Send tells a peer of ended sessions (Client.SendEnded).
	Send func(ctx context.Context, to Target, ended []EndedSession) error
	// Apply ends, in this replica's gateway, the sessions another replica
	// ended: key -> until when it could be taken up
	// (gateway.Gateway.EndedElsewhere).
	Apply func(ended map[string]time.Time)
	// Every is how often unsent ends are tried again, and how soon a
	// replica that joined is told; zero is a second.
	Every time.Duration
	// FlushAfter, when set, is awaited once Start's context ends (the
	// gateway's drain, in which agents may still DELETE), then what is
	// unsent is sent a last time.
	FlushAfter <-chan struct{}
	// Log is where a peer that cannot be told is logged.
	Log logr.Logger
}

// maxKnownEnds bounds the ends kept, as the gateway bounds the ends it
// remembers; beyond it the oldest are forgotten
// (mcpbridge_replica_session_ends_dropped_total).
const maxKnownEnds = 1 << 18

// sendTimeout bounds one request to a peer; maxFlushWait bounds the wait
// for FlushAfter.
const (
	sendTimeout  = 10 * time.Second
	maxFlushWait = 30 * time.Second
)

// knownEnd is an ended session, numbered in the order learnt.
type knownEnd struct {
	EndedSession
	seq uint64
}

// NewSessionEnds makes the relay; Start runs it.
func NewSessionEnds(cfg SessionEndsConfig) *SessionEnds {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	return &SessionEnds{cfg: cfg, next: 1, have: map[string]time.Time{}, told: map[string]uint64{},
		sending: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// NeedLeaderElection is false: every replica relays its gateway's ends.
func (s *SessionEnds) NeedLeaderElection() bool { return false }

// Ended is the gateway's SessionsEnded: the sessions of keys, which could
// be taken up until until, were ended here.
func (s *SessionEnds) Ended(keys []string, until time.Time) {
	s.mu.Lock()
	for _, k := range keys {
		s.learnLocked(EndedSession{Key: k, Until: until})
	}
	s.mu.Unlock()
	s.poke()
}

// Received is the endpoint's Config.Ended: another replica ended these
// sessions, or passed them on. They are ended here, and passed on.
func (s *SessionEnds) Received(ended []EndedSession) {
	byKey := make(map[string]time.Time, len(ended))
	for _, e := range ended {
		if e.Until.After(byKey[e.Key]) {
			byKey[e.Key] = e.Until
		}
	}
	s.cfg.Apply(byKey)
	s.mu.Lock()
	learnt := false
	for k, until := range byKey {
		learnt = s.learnLocked(EndedSession{Key: k, Until: until}) || learnt
	}
	s.mu.Unlock()
	if learnt {
		s.poke()
	}
}

// learnLocked keeps e unless it is known already or can no longer be
// taken up anyway, and reports whether it kept it. Beyond maxKnownEnds the
// oldest end is forgotten.
func (s *SessionEnds) learnLocked(e EndedSession) bool {
	if !e.Until.After(time.Now()) {
		return false
	}
	if cur, ok := s.have[e.Key]; ok && !e.Until.After(cur) {
		return false
	}
	if len(s.known) >= maxKnownEnds {
		s.forgetLocked(s.known[0])
		s.known = s.known[1:]
		sessionEndsDropped.Inc()
	}
	s.known = append(s.known, knownEnd{EndedSession: e, seq: s.next})
	s.have[e.Key] = e.Until
	s.next++
	return true
}

func (s *SessionEnds) forgetLocked(e knownEnd) {
	if s.have[e.Key].Equal(e.Until) {
		delete(s.have, e.Key)
	}
}

// pruneLocked forgets the ends that can no longer be taken up anyway.
func (s *SessionEnds) pruneLocked(now time.Time) {
	s.known = slices.DeleteFunc(s.known, func(e knownEnd) bool {
		if e.Until.After(now) {
			return false
		}
		s.forgetLocked(e)
		return true
	})
}

func (s *SessionEnds) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start sends until ctx ends, then, after FlushAfter, a last time.
func (s *SessionEnds) Start(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flush(ctx)
			return nil
		case <-s.wake:
		case <-t.C:
		}
		s.round(ctx)
	}
}

// flush waits for the sends under way and FlushAfter, then sends what is
// left once, within sendTimeout.
func (s *SessionEnds) flush(ctx context.Context) {
	if s.cfg.FlushAfter != nil {
		select {
		case <-s.cfg.FlushAfter:
		case <-time.After(maxFlushWait):
		}
	}
	s.sends.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	defer cancel()
	s.round(fctx)
	s.sends.Wait()
}

// round starts a send to every live peer that has something to be told
// and no send under way, and forgets the peers that left.
func (s *SessionEnds) round(ctx context.Context) {
	members := s.cfg.Members()
	live := make(map[string]bool, len(members))
	for _, m := range members {
		live[peerKey(m)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(time.Now())
	for key := range s.told {
		if !live[key] && !s.sending[key] {
			delete(s.told, key)
		}
	}
	for _, m := range members {
		key := peerKey(m)
		if m.Name == s.cfg.Self || s.sending[key] || s.pendingLocked(key) == 0 {
			continue
		}
		s.sending[key] = true
		s.sends.Go(func() { s.tell(ctx, m) })
	}
}

// tell sends to peer what it was not told yet, in requests of at most
// maxEndedPerRequest, and records each one it answered.
func (s *SessionEnds) tell(ctx context.Context, peer Target) {
	key := peerKey(peer)
	defer func() {
		s.mu.Lock()
		delete(s.sending, key)
		s.mu.Unlock()
	}()
	for {
		batch, upTo := s.batch(key)
		if upTo == 0 {
			return
		}
		if err := s.send(ctx, peer, batch); err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.V(1).Info("cannot tell a replica of ended agent sessions; trying again",
					"replica", peer.Name, "sessions", len(batch), "error", err.Error())
			}
			return
		}
		s.mu.Lock()
		s.told[key] = max(s.told[key], upTo)
		s.mu.Unlock()
	}
}

// send tells peer of batch, if anything in it.
func (s *SessionEnds) send(ctx context.Context, peer Target, batch []EndedSession) error {
	if len(batch) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return s.cfg.Send(sctx, peer, batch)
}

// peerKey names a peer's process: a replica restarted under the same name
// (before its peers saw its Lease expire) is a peer not told anything yet.
func peerKey(t Target) string { return t.Name + "/" + t.Process }

// firstUntoldLocked is the index in known of the first end peer was not
// told.
func (s *SessionEnds) firstUntoldLocked(peer string) int {
	told := s.told[peer]
	i, _ := slices.BinarySearchFunc(s.known, told+1, func(e knownEnd, seq uint64) int {
		switch {
		case e.seq < seq:
			return -1
		case e.seq > seq:
			return 1
		}
		return 0
	})
	return i
}

func (s *SessionEnds) pendingLocked(peer string) int {
	return len(s.known) - s.firstUntoldLocked(peer)
}

// batch is the next request for peer, and the seq of the last end it
// covers (zero when peer was told everything).
func (s *SessionEnds) batch(peer string) ([]EndedSession, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rest := s.known[s.firstUntoldLocked(peer):]
	rest = rest[:min(len(rest), maxEndedPerRequest)]
	if len(rest) == 0 {
		return nil, 0
	}
	// An end that expired since the last prune is left out, not sent: a
	// peer would take it as news and pass it on.
	now := time.Now()
	out := make([]EndedSession, 0, len(rest))
	for _, e := range rest {
		if e.Until.After(now) {
			out = append(out, e.EndedSession)
		}
	}
	return out, rest[len(rest)-1].seq
}
