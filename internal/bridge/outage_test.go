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

// The delay before reconnect k is min(maxDelay, initialDelay * 2^(k-1)).
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

// The budget is maxAttempts consecutive failed attempts per outage, whether
// the outage opened with a failed first connection at startup (which is its
// attempt 1, so maxAttempts-1 reconnects follow) or with the loss of a
// stable connection (not an attempt, so maxAttempts reconnects follow).
// Reconnect delays double from initialDelay per reconnect of the outage.
func TestOutageBudgetCountsEveryFailedAttemptOfTheOutage(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		maxAttempts int
		atStartup   bool
		wantN       []int
		wantDelay   []time.Duration
	}{
		{"startup, maxAttempts 1: the failed first connection spends it", 1, true, nil, nil},
		{"startup, maxAttempts 2", 2, true, []int{2}, []time.Duration{20 * ms}},
		{"startup, maxAttempts 7", 7, true, []int{2, 3, 4, 5, 6, 7},
			[]time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}},
		{"after a stable connection, maxAttempts 1", 1, false, []int{1}, []time.Duration{20 * ms}},
		{"after a stable connection, maxAttempts 3", 3, false, []int{1, 2, 3}, []time.Duration{20 * ms, 40 * ms, 80 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outage{policy: backoffTestPolicy(20*ms, 200*ms, tc.maxAttempts)}
			if tc.atStartup {
				o.failedAttempt() // the first connection failed
			} else if !o.upFor(time.Hour) {
				t.Fatal("a connection up for an hour did not end the outage")
			}
			for i := range tc.wantN {
				n, d, ok := o.next()
				if !ok || n != tc.wantN[i] || d != tc.wantDelay[i] {
					t.Fatalf("next() #%d = (%d, %v, %v), want (%d, %v, true)", i+1, n, d, ok, tc.wantN[i], tc.wantDelay[i])
				}
				if o.failed != n-1 {
					t.Fatalf("attempt %d scheduled with failed = %d, want %d", n, o.failed, n-1)
				}
				o.failedAttempt()
			}
			for range 3 { // stays exhausted
				if n, d, ok := o.next(); ok {
					t.Fatalf("next() after the budget = (%d, %v, true), want exhausted", n, d)
				}
			}
			if o.failed != tc.maxAttempts {
				t.Errorf("failed = %d when exhausted, want maxAttempts %d", o.failed, tc.maxAttempts)
			}
		})
	}
}

// A connection that stayed up at least maxDelay closes the outage (the next
// loss gets a fresh budget); a shorter one is one more failed attempt of the
// same outage, the connection at startup included.
func TestOutageStabilityWindow(t *testing.T) {
	ms := time.Millisecond
	maxDelay := 200 * ms
	type step struct {
		lostAfter time.Duration // -1: an attempt that never connected
		wantFail  int
		wantN     int // 0: want exhausted
		wantDelay time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"up exactly maxDelay resets the budget", []step{
			{-1, 1, 2, 20 * ms}, {-1, 2, 3, 40 * ms}, {maxDelay, 0, 1, 20 * ms},
		}},
		{"up longer than maxDelay resets the budget", []step{
			{-1, 1, 2, 20 * ms}, {-1, 2, 3, 40 * ms}, {time.Hour, 0, 1, 20 * ms},
		}},
		{"up just under maxDelay continues the outage", []step{
			{-1, 1, 2, 20 * ms}, {maxDelay - time.Nanosecond, 2, 3, 40 * ms},
		}},
		{"crash loop from startup: every brief connection is a failed attempt", []step{
			{time.Millisecond, 1, 2, 20 * ms}, {time.Millisecond, 2, 3, 40 * ms}, {time.Millisecond, 3, 0, 0},
		}},
		{"crash loop after a stable connection", []step{
			{maxDelay, 0, 1, 20 * ms}, {time.Millisecond, 1, 2, 40 * ms}, {time.Millisecond, 2, 3, 80 * ms},
			{time.Millisecond, 3, 0, 0},
		}},
		{"stable connections forever never exhaust", []step{
			{maxDelay, 0, 1, 20 * ms}, {maxDelay, 0, 1, 20 * ms}, {maxDelay, 0, 1, 20 * ms},
			{maxDelay, 0, 1, 20 * ms}, {maxDelay, 0, 1, 20 * ms},
		}},
		{"a stable connection after a failed reconnect resets the count", []step{
			{time.Millisecond, 1, 2, 20 * ms}, {-1, 2, 3, 40 * ms}, {maxDelay, 0, 1, 20 * ms},
			{time.Millisecond, 1, 2, 40 * ms},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outage{policy: backoffTestPolicy(20*ms, maxDelay, 3)}
			for i, st := range tc.steps {
				if st.lostAfter < 0 || !o.upFor(st.lostAfter) {
					o.failedAttempt()
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
