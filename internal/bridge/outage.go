package bridge

import (
	"time"

	"github.com/mcpbridge/operator/internal/policy"
)

// backoffDelay is the delay before attempt n (from 1) of an outage:
// min(maxDelay, initialDelay * 2^(n-1)), without overflowing.
func backoffDelay(p policy.Reconnect, n int) time.Duration {
	d := p.InitialDelay
	for i := 1; i < n; i++ {
		if d > p.MaxDelay/2 {
			return p.MaxDelay
		}
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// outage is the attempt budget of §4.2: reconnect attempts since the last
// stable connection, shared by every loss until a connection stays up for
// maxDelay.
type outage struct {
	policy  policy.Reconnect
	attempt int // reconnect attempts scheduled in this outage
	failed  int // consecutive failed attempts (status failedAttempts)
}

// upFor is told how long the current connection has been up, when the
// stability window's timer fires and when the connection is lost. It is the
// only place that applies the window: a connection up for at least maxDelay
// ends the outage (the next loss starts a fresh budget), and upFor reports
// whether it did.
func (o *outage) upFor(d time.Duration) bool {
	if d < o.policy.MaxDelay {
		return false
	}
	o.attempt, o.failed = 0, 0
	return true
}

// failedAttempt records an attempt that never connected.
func (o *outage) failedAttempt() { o.failed++ }

// next schedules the next reconnect attempt: its number and delay, or
// ok=false when the budget of maxAttempts reconnect attempts is spent.
func (o *outage) next() (n int, delay time.Duration, ok bool) {
	if o.attempt >= o.policy.MaxAttempts {
		return o.attempt, 0, false
	}
	o.attempt++
	return o.attempt, backoffDelay(o.policy, o.attempt), true
}
