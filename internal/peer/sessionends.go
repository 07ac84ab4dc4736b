package peer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// SessionEnds tells the other replicas of the agent sessions this
// replica's gateway ended (DELETE, idle), so that none of them takes such a
// session up again from its sealed id, and tells a replica that joins later
// every end it knows of (its own and those it was told) while they could
// still be taken up. See docs/design.md, "Sessions on every replica".
//
// It is a manager.Runnable on every replica: Ended queues and never
// blocks; Start sends, at once after an end and then every SessionEndsConfig.Every,
// to each live peer what it has not been told, and tries again there until
// the peer answers or leaves.
type SessionEnds struct {
	cfg SessionEndsConfig

	mu     sync.Mutex
	known  []knownEnd          // in the order learnt: seq increases
	next   uint64              // seq of the next end learnt
	synced map[string]peerSync // by peer name
	wake   chan struct{}
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
	// ended (gateway.Gateway.EndedElsewhere).
	Apply func(keys []string, until time.Time)
	// Every is how often unsent ends are tried again, and how soon a
	// replica that joined is told; zero is a second.
	Every time.Duration
	// Log is where a peer that cannot be told is logged.
	Log logr.Logger
}

// maxKnownEnds bounds the ends kept for replicas that join later, as the
// gateway bounds the ends it remembers.
const maxKnownEnds = 1 << 18

// sendTimeout bounds one request to a peer.
const sendTimeout = 10 * time.Second

// knownEnd is an ended session and where it was learnt: own ends go to
// every peer, ends told by another replica only to peers that joined
// after (the replica that ended them tells the others itself).
type knownEnd struct {
	EndedSession
	seq uint64
	own bool
}

// peerSync is what a peer has been told: every end with a seq up to upTo
// that it was to get, and, once caughtUp, every end known when it joined.
type peerSync struct {
	upTo     uint64
	caughtUp bool
}

// NewSessionEnds makes the relay; Start runs it.
func NewSessionEnds(cfg SessionEndsConfig) *SessionEnds {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	return &SessionEnds{cfg: cfg, next: 1, synced: map[string]peerSync{}, wake: make(chan struct{}, 1)}
}

// NeedLeaderElection is false: every replica relays its gateway's ends.
func (s *SessionEnds) NeedLeaderElection() bool { return false }

// Ended is the gateway's SessionsEnded: the sessions of keys, which could
// be taken up until until, were ended here. It never blocks.
func (s *SessionEnds) Ended(keys []string, until time.Time) {
	s.mu.Lock()
	for _, k := range keys {
		s.learnLocked(EndedSession{Key: k, Until: until}, true)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Received is the endpoint's Config.Ended: another replica ended these
// sessions. They are ended here, and kept for replicas that join later.
func (s *SessionEnds) Received(ended []EndedSession) {
	byUntil := map[time.Time][]string{}
	for _, e := range ended {
		byUntil[e.Until] = append(byUntil[e.Until], e.Key)
	}
	for until, keys := range byUntil {
		s.cfg.Apply(keys, until)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ended {
		s.learnLocked(e, false)
	}
}

func (s *SessionEnds) learnLocked(e EndedSession, own bool) {
	if len(s.known) >= maxKnownEnds {
		s.pruneLocked(time.Now())
		if len(s.known) >= maxKnownEnds {
			sessionEndsDropped.Inc()
			return
		}
	}
	s.known = append(s.known, knownEnd{EndedSession: e, seq: s.next, own: own})
	s.next++
}

// pruneLocked forgets the ends that can no longer be taken up anyway.
func (s *SessionEnds) pruneLocked(now time.Time) {
	s.known = slices.DeleteFunc(s.known, func(e knownEnd) bool { return !e.Until.After(now) })
}

// Start sends until ctx ends.
func (s *SessionEnds) Start(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-t.C:
		}
		s.round(ctx)
	}
}

// round tells every live peer what it has not been told, the peers at
// once, and forgets the peers that left.
func (s *SessionEnds) round(ctx context.Context) {
	members := s.cfg.Members()
	s.forget(members)
	var wg sync.WaitGroup
	for _, m := range members {
		if m.Name != s.cfg.Self {
			wg.Go(func() { s.tell(ctx, m) })
		}
	}
	wg.Wait()
}

func (s *SessionEnds) forget(members []Target) {
	live := make(map[string]bool, len(members))
	for _, m := range members {
		live[m.Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(time.Now())
	for name := range s.synced {
		if !live[name] {
			delete(s.synced, name)
		}
	}
}

// tell sends to peer what it is to get, in requests of at most
// maxEndedPerRequest, and records each one it answered.
func (s *SessionEnds) tell(ctx context.Context, peer Target) {
	for {
		batch, upTo, done := s.pending(peer.Name)
		if len(batch) > 0 {
			sctx, cancel := context.WithTimeout(ctx, sendTimeout)
			err := s.cfg.Send(sctx, peer, batch)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Log.V(1).Info("cannot tell a replica of ended agent sessions; trying again",
						"replica", peer.Name, "sessions", len(batch), "error", err.Error())
				}
				return
			}
		}
		s.mu.Lock()
		s.synced[peer.Name] = peerSync{upTo: upTo, caughtUp: s.synced[peer.Name].caughtUp || done}
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// pending is the next request for peer: the ends after what it was told
// that it is to get, at most maxEndedPerRequest, the seq of the last end
// the request covers, and whether it covers every end known now.
func (s *SessionEnds) pending(peer string) (batch []EndedSession, upTo uint64, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sync := s.synced[peer]
	upTo = sync.upTo
	for _, e := range s.known {
		if e.seq <= sync.upTo || (!e.own && sync.caughtUp) {
			continue
		}
		if len(batch) == maxEndedPerRequest {
			return batch, upTo, false
		}
		batch = append(batch, e.EndedSession)
		upTo = e.seq
	}
	return batch, s.next - 1, true
}
