package bridge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"

	"github.com/mcpbridge/operator/test/fixture"
)

// Events end at a blank line, as the SDK's scanner splits lines ("\n",
// and "\r\n" with its "\r" dropped), however the reads cut the stream.
func TestBlankLinesCountsTheEventsTheSDKWouldSplit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   int
	}{
		{"one event", []string{"event: message\ndata: {}\n\n"}, 1},
		{"CRLF", []string{"data: {}\r\n\r\n"}, 1},
		{"three events", []string{"data: 1\n\ndata: 2\n\ndata: 3\n\n"}, 3},
		{"cut before the blank line", []string{"data: {}\n", "\n"}, 1},
		{"cut inside CRLF CRLF", []string{"data: {}\r", "\n\r", "\n"}, 1},
		{"cut in every byte", strings.Split("data: 1\r\n\r\ndata: 2\n\n", ""), 2},
		{"an event not ended yet", []string{"data: {}\n"}, 0},
		{"CR alone ends no line", []string{"data: {}\r\r"}, 0},
		{"a line of two CRs is not blank", []string{"data: {}\n\r\r\n"}, 0},
		{"a blank line first", []string{"\n"}, 1},
		{"nothing", []string{""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls lineState
			got := 0
			for _, c := range tc.chunks {
				got += ls.blankLines([]byte(c))
			}
			if got != tc.want {
				t.Fatalf("%q: %d events, want %d", tc.chunks, got, tc.want)
			}
		})
	}
}

// A paced body hands its events on no faster than its limiter allows, and
// a read that waits ends with its context.
func TestAPacedBodyHandsEventsOnAtItsPace(t *testing.T) {
	const perSecond, burst, events = 1000, 10, 210
	body := strings.Repeat("data: {}\n\n", events)
	b := &pacedBody{ReadCloser: io.NopCloser(strings.NewReader(body)), ctx: context.Background(),
		events: rate.NewLimiter(perSecond, burst)}
	start := time.Now()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != body {
		t.Fatalf("read %d bytes, %v; want the body whole", len(got), err)
	}
	// The burst is free; the other 200 events take 200 ms at least.
	if d := time.Since(start); d < (events-burst)*time.Second/perSecond {
		t.Fatalf("%d events read in %v, faster than %d a second after a burst of %d", events, d, perSecond, burst)
	}

	ctx, cancel := context.WithCancel(context.Background())
	b = &pacedBody{ReadCloser: io.NopCloser(strings.NewReader(body)), ctx: ctx, events: rate.NewLimiter(0.001, burst)}
	cancel()
	if _, err := io.ReadAll(b); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with its context done: %v, want context.Canceled", err)
	}
}

// A server that floods its GET stream with notifications is read at the
// pace of sdkEventsPerSecond: it cannot make the manager decode tens of
// thousands of events a second (docs/design.md, "Budgets"). Its tools stay
// callable meanwhile.
func TestANotificationFloodIsReadAtThePace(t *testing.T) {
	fx := httpFixture(t, fixture.Options{})
	var written atomic.Int64
	var first atomic.Pointer[time.Time]
	event := []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"" +
		strings.Repeat("x", 16<<10) + "\"}}\n\n")
	up := httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			fx.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		now := time.Now()
		first.CompareAndSwap(nil, &now)
		for {
			if _, err := w.Write(event); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			written.Add(1)
		}
	}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	g := NewWithT(t)
	g.Eventually(written.Load, eventually).Should(BeNumerically(">", 0), "the flood started")
	for range 10 {
		res, isError, err := s.CallToolJSON(context.Background(), fixture.ToolEcho, []byte(`{"text":"still here"}`))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(isError).To(BeFalse())
		g.Expect(string(res)).To(ContainSubstring("still here"))
	}
	time.Sleep(2 * time.Second) // the flood goes on; what it wrote is counted below
	n, d := written.Load(), time.Since(*first.Load())
	// The server writes what the supervisor reads, and what the sockets'
	// buffers hold besides: unpaced, the supervisor read thousands of these
	// events a second.
	limit := int64(d.Seconds()*sdkEventsPerSecond) + sdkEventsBurst + socketBuffers(t)/int64(len(event)) + 2
	g.Expect(n).To(BeNumerically("<=", limit), "events written in %v", d)
}

// socketBuffers is the most a loopback TCP connection's two buffers can
// hold, by the kernel's limits (the receive buffer grows with autotuning).
func socketBuffers(t *testing.T) int64 {
	total := int64(0)
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"} {
		b, err := os.ReadFile(f)
		fields := strings.Fields(string(b))
		if err != nil || len(fields) != 3 {
			t.Fatalf("%s: %q, %v", f, b, err)
		}
		most, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		total += most
	}
	return total
}
