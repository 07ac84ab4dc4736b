package peer

import "time"

// SetPingTimeouts shortens the health checks of the Clients made from now
// on; restore puts them back.
func SetPingTimeouts(after, timeout time.Duration) (restore func()) {
	oldAfter, oldTimeout := pingAfter, pingTimeout
	pingAfter, pingTimeout = after, timeout
	return func() { pingAfter, pingTimeout = oldAfter, oldTimeout }
}

// Known is how many ended sessions s keeps.
func (s *SessionEnds) Known() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.known)
}
