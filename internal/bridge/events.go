package bridge

// Event is a transition worth telling a user about; the controller turns
// it into a Kubernetes event. Reasons are the API's (v1alpha1.Reason*).
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// maxPendingEvents bounds the events kept between two drains.
const maxPendingEvents = 64

// emit queues an event for the next DrainEvents and signals a change.
func (s *Supervisor) emit(warning bool, reason, message string) {
	s.mu.Lock()
	if len(s.events) == maxPendingEvents {
		s.events = s.events[1:]
	}
	s.events = append(s.events, Event{Warning: warning, Reason: reason, Message: message})
	s.mu.Unlock()
	s.signal()
}

// DrainEvents returns the events since the last drain, oldest first.
func (s *Supervisor) DrainEvents() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.events
	s.events = nil
	return out
}
