package bridge

import (
	"time"

	"github.com/mcpbridge/operator/internal/policy"
)

// An outage is the time from the first failed attempt to the next stable
// connection; at startup, the time until the first connection is stable.
// Its budget is reconnect.maxAttempts consecutive failed attempts, and every
// attempt counts that does not end in a stable connection: one that never
// reached Ready (the first connection at startup included), and one whose
// connection was lost inside the stability window (a crash loop). A loss
// after a stable connection opens a fresh outage and is not an attempt.
// See docs/design.md, "Backoff and the attempt budget".

// backoffDelay is the delay before the k-th reconnect (from 1) of an outage:
// min(maxDelay, initialDelay * 2^(k-1)), without overflowing.
func backoffDelay(p policy.Reconnect, k int) time.Duration {
	d := p.InitialDelay
	for i := 1; i < k; i++ {
		if d > p.MaxDelay/2 {
			return p.MaxDelay
		}
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// outage counts the attempt budget of the current outage.
type outage struct {
	policy     policy.Reconnect
	failed     int // consecutive failed attempts (status failedAttempts), at most MaxAttempts
	reconnects int // reconnects scheduled in this outage; numbers their delays
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
	o.failed, o.reconnects = 0, 0
	return true
}

// failedAttempt records an attempt that did not end in a stable connection.
func (o *outage) failedAttempt() { o.failed++ }

// next schedules the next attempt of the outage: its number within the
// outage (one more than the failed ones) and the delay before it, or
// ok=false when maxAttempts attempts have failed.
func (o *outage) next() (n int, delay time.Duration, ok bool) {
	if o.failed >= o.policy.MaxAttempts {
		return o.failed, 0, false
	}
	o.reconnects++
	return o.failed + 1, backoffDelay(o.policy, o.reconnects), true
}
