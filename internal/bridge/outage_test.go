package bridge

import (
	"math"
	"testing"
	"time"

	"github.com/mcpbridge/operator/internal/policy"
)

// backoffTestPolicy is a reconnect policy with the SPEC's default shape.
func backoffTestPolicy(initial, maxDelay time.Duration, maxAttempts int) policy.Reconnect {
	return policy.Reconnect{Enabled: true, InitialDelay: initial, MaxDelay: maxDelay, MaxAttempts: maxAttempts}
}

// §4.2: the delay before attempt n is min(maxDelay, initialDelay * 2^(n-1)).
func TestBackoffDelayDoublesFromInitialAndCapsAtMax(t *testing.T) {
	ms := time.Millisecond
	p := backoffTestPolicy(500*ms, 30*time.Second, 10)
	want := []time.Duration{500 * ms, 1000 * ms, 2000 * ms, 4000 * ms, 8000 * ms, 16000 * ms, 30000 * ms, 30000 * ms, 30000 * ms}
	for i, w := range want {
		n := i + 1
		if got := backoffDelay(p, n); got != w {
			t.Errorf("backoffDelay(500ms..30s, n=%d) = %v, want %v", n, got, w)
		}
	}
}

func TestBackoffDelayTable(t *testing.T) {
	ms := time.Millisecond
	maxMs := time.Duration(math.MaxInt32) * ms // the policy's upper bound for both delays
	for _, tc := range []struct {
		name              string
		initial, maxDelay time.Duration
		n                 int
		want              time.Duration
	}{
		{"first attempt is the initial delay", 20 * ms, 200 * ms, 1, 20 * ms},
		{"second attempt doubles", 20 * ms, 200 * ms, 2, 40 * ms},
		{"fourth attempt", 20 * ms, 200 * ms, 4, 160 * ms},
		{"fifth attempt capped", 20 * ms, 200 * ms, 5, 200 * ms},
		{"cap that is not a power-of-two multiple", 20 * ms, 150 * ms, 4, 150 * ms},
		{"initial equals max", 200 * ms, 200 * ms, 1, 200 * ms},
		{"initial equals max, later attempt", 200 * ms, 200 * ms, 7, 200 * ms},
		{"n=100 with defaults", 500 * ms, 30 * time.Second, 100, 30 * time.Second},
		{"n=100 with the policy's largest max", 1 * ms, maxMs, 100, maxMs},
		{"n=31 just below the largest max", 1 * ms, maxMs, 31, (1 << 30) * ms},
		{"n=32 reaches the largest max", 1 * ms, maxMs, 32, maxMs},
		{"both delays at the policy's bound", maxMs, maxMs, 100, maxMs},
		{"n=1000", 1 * ms, 30 * time.Second, 1000, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backoffDelay(backoffTestPolicy(tc.initial, tc.maxDelay, 10), tc.n)
			if got != tc.want {
				t.Fatalf("backoffDelay(%v..%v, n=%d) = %v, want %v", tc.initial, tc.maxDelay, tc.n, got, tc.want)
			}
		})
	}
}

// backoffDelay promises "without overflowing" for any durations, not only
// those policy.Resolve lets through: a programmatic Policy can carry any
// time.Duration, and a negative or zero delay would turn backoff into a hot
// reconnect loop.
func TestBackoffDelayNeverOverflowsForHugeDurations(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name              string
		initial, maxDelay time.Duration
		n                 int
		want              time.Duration
	}{
		{"1ns doubled 100 times against MaxInt64", 1, huge, 100, huge},
		{"2^62 doubled once against MaxInt64", 1 << 62, huge, 2, huge},
		{"2^62 at n=100 against MaxInt64", 1 << 62, huge, 100, huge},
		{"MaxInt64/3 at n=3 against MaxInt64", huge / 3, huge, 3, huge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backoffDelay(backoffTestPolicy(tc.initial, tc.maxDelay, 10), tc.n)
			if got != tc.want {
				t.Fatalf("backoffDelay(%d..%d, n=%d) = %d, want %d (overflowed)", tc.initial, tc.maxDelay, tc.n, got, tc.want)
			}
		})
	}
}

// §4.2: one outage has a budget of maxAttempts reconnect attempts; each
// scheduled attempt has the next delay; then the budget is spent for good.
func TestOutageBudgetAllowsMaxAttemptsThenExhausts(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		maxAttempts int
		want        []time.Duration
	}{
		{1, []time.Duration{20 * ms}},
		{3, []time.Duration{20 * ms, 40 * ms, 80 * ms}},
		{7, []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms, 200 * ms}},
	} {
		o := outage{policy: backoffTestPolicy(20*ms, 200*ms, tc.maxAttempts)}
		o.failedAttempt() // the attempt that opened the outage
		for i, w := range tc.want {
			n, d, ok := o.next()
			if !ok || n != i+1 || d != w {
				t.Fatalf("maxAttempts=%d: next() #%d = (%d, %v, %v), want (%d, %v, true)", tc.maxAttempts, i+1, n, d, ok, i+1, w)
			}
			o.failedAttempt()
		}
		for range 3 { // stays exhausted
			if n, d, ok := o.next(); ok {
				t.Fatalf("maxAttempts=%d: next() after the budget = (%d, %v, true), want exhausted", tc.maxAttempts, n, d)
			}
		}
		if o.failed != tc.maxAttempts+1 {
			t.Errorf("maxAttempts=%d: failed = %d, want %d (every failed attempt counted)", tc.maxAttempts, o.failed, tc.maxAttempts+1)
		}
	}
}

// §4.2: a connection that stayed up at least maxDelay closes the outage (the
// next loss gets a fresh budget); a shorter one is one more failed attempt
// of the same outage.
func TestOutageStabilityWindow(t *testing.T) {
	ms := time.Millisecond
	maxDelay := 200 * ms
	type step struct {
		lostAfter time.Duration // -1: failedAttempt instead of a loss
		wantN     int           // 0: want exhausted
		wantDelay time.Duration
		wantFail  int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"up exactly maxDelay resets the budget", []step{
			{-1, 1, 20 * ms, 1}, {-1, 2, 40 * ms, 2}, {maxDelay, 1, 20 * ms, 0},
		}},
		{"up longer than maxDelay resets the budget", []step{
			{-1, 1, 20 * ms, 1}, {-1, 2, 40 * ms, 2}, {-1, 3, 80 * ms, 3}, {time.Hour, 1, 20 * ms, 0},
		}},
		{"up just under maxDelay continues the outage", []step{
			{-1, 1, 20 * ms, 1}, {maxDelay - time.Nanosecond, 2, 40 * ms, 2},
		}},
		{"crash loop of brief connects exhausts the budget", []step{
			{time.Millisecond, 1, 20 * ms, 1}, {time.Millisecond, 2, 40 * ms, 2}, {time.Millisecond, 3, 80 * ms, 3},
			{time.Millisecond, 0, 0, 4},
		}},
		{"stable connections forever never exhaust", []step{
			{maxDelay, 1, 20 * ms, 0}, {maxDelay, 1, 20 * ms, 0}, {maxDelay, 1, 20 * ms, 0},
			{maxDelay, 1, 20 * ms, 0}, {maxDelay, 1, 20 * ms, 0},
		}},
		{"a stable connection after a failed reconnect resets the count", []step{
			{time.Millisecond, 1, 20 * ms, 1}, {-1, 2, 40 * ms, 2}, {maxDelay, 1, 20 * ms, 0},
			{time.Millisecond, 2, 40 * ms, 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outage{policy: backoffTestPolicy(20*ms, maxDelay, 3)}
			for i, st := range tc.steps {
				if st.lostAfter < 0 {
					o.failedAttempt()
				} else {
					if !o.upFor(st.lostAfter) {
						o.failedAttempt()
					}
				}
				if o.failed != st.wantFail {
					t.Fatalf("step %d: failed = %d, want %d", i, o.failed, st.wantFail)
				}
				n, d, ok := o.next()
				if st.wantN == 0 {
					if ok {
						t.Fatalf("step %d: next() = (%d, %v, true), want exhausted", i, n, d)
					}
					continue
				}
				if !ok || n != st.wantN || d != st.wantDelay {
					t.Fatalf("step %d: next() = (%d, %v, %v), want (%d, %v, true)", i, n, d, ok, st.wantN, st.wantDelay)
				}
			}
		})
	}
}
