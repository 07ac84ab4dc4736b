package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// A paced reader hands its lines on no faster than its limiter allows,
// however the reads cut them, and a read that waits ends with its context.
func TestAPacedReaderHandsLinesOnAtItsPace(t *testing.T) {
	const perSecond, burst, lines = 1000, 10, 210
	stream := strings.Repeat("data: {}\n\n", lines/2)
	p := pacedReader{r: iotest.HalfReader(strings.NewReader(stream)), ctx: context.Background(), pace: &pace{lines: rate.NewLimiter(perSecond, burst), bytes: rate.NewLimiter(rate.Inf, 0)}}
	start := time.Now()
	got, err := io.ReadAll(&p)
	if err != nil || string(got) != stream {
		t.Fatalf("read %d bytes, %v; want the stream whole", len(got), err)
	}
	// The burst is free; the other 200 lines take 200 ms at least.
	if d := time.Since(start); d < (lines-burst)*time.Second/perSecond {
		t.Fatalf("%d lines read in %v, faster than %d a second after a burst of %d", lines, d, perSecond, burst)
	}

	ctx, cancel := context.WithCancel(context.Background())
	p = pacedReader{r: strings.NewReader(stream), ctx: ctx, pace: &pace{lines: rate.NewLimiter(0.001, burst), bytes: rate.NewLimiter(rate.Inf, 0)}}
	cancel()
	if _, err := io.ReadAll(&p); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with its context done: %v, want context.Canceled", err)
	}
}

// A server that floods its GET stream with notifications is read at the
// pace of sdkEventsPerSecond: it cannot make the manager decode tens of
// thousands of events a second (docs/design.md, "Budgets"). Its tools stay
// callable meanwhile.
func TestANotificationFloodIsReadAtThePace(t *testing.T) {
	event := []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"" +
		strings.Repeat("x", 16<<10) + "\"}}\n\n")
	s, written, since := getStreamFlood(t, event)
	g := NewWithT(t)
	for range 10 {
		res, isError, err := s.CallToolJSON(context.Background(), fixture.ToolEcho, []byte(`{"text":"still here"}`))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(isError).To(BeFalse())
		g.Expect(string(res)).To(ContainSubstring("still here"))
	}
	time.Sleep(2 * time.Second) // the flood goes on; what it wrote is counted below
	n, d := written.Load(), since()
	// The server writes what the supervisor reads, and what the sockets'
	// buffers hold besides: unpaced, the supervisor read thousands of these
	// events a second.
	lines := (d.Seconds()*linesPerSecond + linesBurst) / float64(bytes.Count(event, newline))
	limit := int64(lines) + socketBuffers(t)/int64(len(event)) + 2
	g.Expect(n).To(BeNumerically("<=", limit), "events written in %v", d)
}

// getStreamFlood starts a supervisor of a server whose GET stream writes
// event without pause, once it is Ready and the flood has started; written
// counts the events written, since is the time since the first.
func getStreamFlood(t *testing.T, event []byte) (s *Supervisor, written *atomic.Int64, since func() time.Duration) {
	written = new(atomic.Int64)
	s, since = serveGETStreams(t, func(w http.ResponseWriter) {
		for {
			if _, err := w.Write(event); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			written.Add(1)
		}
	})
	NewWithT(t).Eventually(written.Load, eventually).Should(BeNumerically(">", 0), "the flood started")
	return s, written, since
}

// serveGETStreams starts a supervisor, and waits until it is Ready, of the
// fixture over Streamable HTTP whose GET streams stream writes; since is
// the time since the first opened.
func serveGETStreams(t *testing.T, stream func(w http.ResponseWriter), mutate ...func(*Options)) (*Supervisor, func() time.Duration) {
	fx := httpFixture(t, fixture.Options{})
	var first atomic.Pointer[time.Time]
	up := httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			fx.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		now := time.Now()
		first.CompareAndSwap(nil, &now)
		stream(w)
	}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()), mutate...)
	waitFor(t, s, "Ready", isReady)
	return s, func() time.Duration { return time.Since(*first.Load()) }
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

// A server that streams lines before a tool call's answer has them read at
// the pace of linesPerSecond, whatever the lines are (events, comments, the
// blank lines that end events), and the answer that follows them still
// arrives: a call's stream cannot make the manager read at loopback speed.
func TestAFloodBeforeAnAnswerIsReadAtThePace(t *testing.T) {
	const flood = linesBurst + linesPerSecond/2 // half a second past the burst
	for _, tc := range []struct{ name, line string }{
		{"notifications", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"},
		{"comment lines", ": still working\n"},
		{"blank lines", "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			perLine := strings.Count(tc.line, "\n")
			up := floodBeforeAnswers(t, strings.Repeat(tc.line, (flood+perLine-1)/perLine))
			s, _ := startSupervisor(t, httpPolicy(up.URL()))
			waitFor(t, s, "Ready", isReady)
			start := time.Now()
			res, isError, err := s.CallToolJSON(context.Background(), fixture.ToolEcho, []byte(`{"text":"x"}`))
			d := time.Since(start)
			if err != nil || isError || !strings.Contains(string(res), "after the flood") {
				t.Fatalf("call: %s, isError %v, %v; want the answer after the flood", res, isError, err)
			}
			// The burst is free; the rest takes its time at the pace.
			if least := (flood - linesBurst) * time.Second / linesPerSecond; d < least {
				t.Fatalf("%d lines before the answer read in %v, want at least %v", flood, d, least)
			}
		})
	}
}

// floodBeforeAnswers serves the fixture, except that it answers each
// tools/call with an SSE stream of flood and then the answer, whose text
// is "after the flood".
func floodBeforeAnswers(t *testing.T, flood string) *httpUpstream {
	fx := httpFixture(t, fixture.Options{})
	return httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
			r.Body = io.NopCloser(bytes.NewReader(body))
			fx.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, flood)
		_, _ = io.WriteString(w, `event: message`+"\n"+`data: {"jsonrpc":"2.0","id":`+string(msg.ID)+
			`,"result":{"content":[{"type":"text","text":"after the flood"}]}}`+"\n\n")
	}))
}

// callsAfterTheFlood makes calls at once to each of sups, servers of
// floodBeforeAnswers, and returns the time until all were answered.
func callsAfterTheFlood(t *testing.T, calls int, sups ...*Supervisor) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range sups {
		for range calls {
			wg.Go(func() {
				res, isError, err := s.CallToolJSON(context.Background(), fixture.ToolEcho, []byte(`{"text":"x"}`))
				if err != nil || isError || !strings.Contains(string(res), "after the flood") {
					t.Errorf("call: %s, isError %v, %v; want the answer after the flood", res, isError, err)
				}
			})
		}
	}
	wg.Wait()
	return time.Since(start)
}

// The events before the answers of many calls in flight to one server
// share one pace: each stream's own would let every call's flood pass its
// burst, a message of the largest size (in a test, 256 calls whose server
// streamed 4 KiB notifications held 1.9 cores).
func TestTheEventsBeforeManyAnswersShareOnePace(t *testing.T) {
	const calls = 8
	for _, tc := range []struct {
		name  string
		event string
		n     int // events before each answer
	}{
		{"many lines", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n", 200},
		{"many bytes", ": " + strings.Repeat("x", 64<<10) + "\n\n", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := floodBeforeAnswers(t, strings.Repeat(tc.event, tc.n))
			s, _ := startSupervisor(t, httpPolicy(up.URL()))
			waitFor(t, s, "Ready", isReady)
			d := callsAfterTheFlood(t, calls, s)
			lines := calls * tc.n * strings.Count(tc.event, "\n")
			size := calls * tc.n * len(tc.event)
			// A tenth less: rate.Limiter grants a little more than its rate
			// to concurrent waiters (it steps back to an earlier time one
			// of them read, and counts that time again): 1.398 s for 1.4 s
			// under -race.
			least := max(time.Duration(lines-othersLinesBurst)*time.Second/othersLinesPerSecond,
				time.Duration(size-othersBytesBurst)*time.Second/othersBytesPerSecond) * 9 / 10
			if d < least {
				t.Fatalf("%d calls' %d lines and %d bytes before their answers read in %v, want at least %v", calls, lines, size, d, least)
			}
		})
	}
}

// A stream that fails before its answer takes from the shared pace what
// it read other than data: comment lines that never end an event are held
// until the result budget is spent, and the call that failed then waits
// as one whose events ended would have. An answer that fails takes
// nothing from it.
func TestAStreamThatFailsTakesItsOtherLinesFromTheSharedPace(t *testing.T) {
	const limit = 32 << 10
	for _, tc := range []struct {
		name, line string
		taken      bool
	}{
		{"comment lines", ": " + strings.Repeat("x", 1022) + "\n", true},
		{"an answer too large", "data: " + strings.Repeat("x", 1018) + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := &pace{lines: rate.NewLimiter(rate.Inf, 0), bytes: rate.NewLimiter(1, 2*limit)}
			body := strings.NewReader(strings.Repeat(tc.line, 2*limit/len(tc.line)))
			_, _, err := readEvents(context.Background(), body, "1", &budget{max: limit}, otherEvents{pace: shared})
			if !errors.Is(err, registry.ErrResultBudget) {
				t.Fatalf("read: %v, want the budget spent", err)
			}
			left := shared.bytes.Tokens()
			if taken := left < 2*limit-limit/2; taken != tc.taken {
				t.Fatalf("%.0f of the shared pace's %d bytes left; want most of the %d held taken: %v", left, 2*limit, limit, tc.taken)
			}
		})
	}
}

// A server that ends its GET stream after every burst, asking the SDK to
// open the next one a millisecond later ("retry: 1"), gets no new burst
// with each: the SDK's GET streams of a link share one pace.
func TestTheSDKsGETStreamsShareOnePace(t *testing.T) {
	const events = linesBurst / 4 // a burst's worth of 4-line events per stream
	var streams atomic.Int64
	_, since := serveGETStreams(t, func(w http.ResponseWriter) {
		n := streams.Add(1)
		var b strings.Builder
		for i := range events {
			fmt.Fprintf(&b, "id: %d-%d\nretry: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n", n, i)
		}
		_, _ = io.WriteString(w, b.String())
	})
	g := NewWithT(t)
	g.Eventually(streams.Load, eventually).Should(BeNumerically(">", 0), "the GET stream opened")
	time.Sleep(2 * time.Second) // the server ends its streams; the SDK opens the next ones
	d := since()
	// Read at one pace, the streams' lines are at most the burst and the
	// pace since the first, and one more stream waiting in the sockets.
	limit := (d.Seconds()*linesPerSecond+linesBurst)/(4*events) + 2
	g.Expect(float64(streams.Load())).To(BeNumerically("<=", limit), "GET streams opened in %v", d)
}

// A server that streams large events (few lines, many bytes) has them read
// at the pace of bytesPerSecond once a message's worth has passed: the SDK
// decodes each, and 83 events of 1 MiB a second held 1.55 cores unpaced.
func TestLargeEventsAreReadAtTheBytePace(t *testing.T) {
	event := []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"" +
		strings.Repeat("x", 1<<20) + "\"}}\n\n")
	_, written, since := getStreamFlood(t, event)
	time.Sleep(2 * time.Second) // the flood goes on; what it wrote is counted below
	n, d := written.Load()*int64(len(event)), since()
	limit := int64(d.Seconds()*bytesPerSecond) + bytesBurst + socketBuffers(t) + int64(len(event))
	NewWithT(t).Expect(n).To(BeNumerically("<=", limit), "bytes written in %v", d)
}

// A stdio server that writes notifications without pause has them read at
// the pace of linesPerSecond, and its answers still come: the calls made
// during the flood succeed, once the lines written before each answer
// have been read at the pace (the pipe holds about 700 of them). So for a
// Local child, and for a Pod's server through the tunnel.
func TestAStdioFloodIsReadAtThePaceAndItsAnswersPass(t *testing.T) {
	// before: the lines the call waits for. The tunnel's socket buffers,
	// which the kernel sizes, hold megabytes the server writes ahead of
	// the manager's reads, so there the flood ends after before lines and
	// the call is answered within its timeout all the same.
	const before, credits = 5 * linesBurst, 16
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, flood ...string) *Supervisor
		// direct: nothing but the pipe holds what the server wrote and
		// the manager has not read, and the flood does not end.
		direct bool
	}{
		{"a Local child", func(t *testing.T, flood ...string) *Supervisor {
			s, _ := startSupervisor(t, stdioPolicy(flood...))
			return s
		}, true},
		{"a Pod, through the tunnel", func(t *testing.T, flood ...string) *Supervisor {
			sh := startPodShim(t, append([]string{fixtureBin, "--flood-lines=" + strconv.Itoa(before)}, flood...)...)
			pods := newTestPods()
			pods.set(readyPod("srv-mcp-1", "uid-1"), true)
			s, _ := startPodSupervisor(t, podPolicy(), pods, sh.port, podToken)
			return s
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, began := eventsPath(t), time.Now()
			s := tc.start(t, "--flood-after=300ms", "--events-file="+ev)
			waitFor(t, s, "Ready", isReady)
			// Lines recorded before the call precede its answer: the
			// manager reads them all, at the pace from the flood's start
			// (after began), with a burst and a line for each line it wrote
			// (the handshake, the tool list, the call: a few).
			waitEvent(t, ev, "the flood", func(e fixture.Event) bool { return e.Kind == fixture.EventFlooded && e.Count >= before })
			written0, start := floodedSoFar(t, ev), time.Now()
			res, err := s.CallTool(context.Background(), fixture.ToolEcho, map[string]any{"text": "during the flood"})
			if err != nil {
				t.Fatalf("call during the flood: %v", err)
			}
			if RenderText(res) != "during the flood" {
				t.Fatalf("call during the flood: %q", RenderText(res))
			}
			if least := (before - linesBurst - credits) * time.Second / linesPerSecond; time.Since(began) < least {
				t.Fatalf("the answer behind %d lines came %v after the server started, want at least %v", before, time.Since(began), least)
			}
			if tc.direct {
				expectAStdioFloodWrittenAtThePace(t, ev, written0, start)
			}
		})
	}
}

// expectAStdioFloodWrittenAtThePace holds that the server recording its
// flood in the events file ev, which had written before lines at start,
// wrote no more since, over its pipe, than the pace lets the manager read.
func expectAStdioFloodWrittenAtThePace(t *testing.T, ev string, before int, start time.Time) {
	t.Helper()
	const calls = 1
	time.Sleep(2 * time.Second) // the flood goes on; what it wrote is counted below
	written, d := floodedSoFar(t, ev), time.Since(start)
	// Since start: read at the pace, with a burst, the pipe's 64 KiB and
	// the lines of one read that the pace has not let through yet (at
	// most as many), a line for each line written to the server, and the
	// lines since the last record.
	const slack = 2 * (64 << 10) / len(fixture.FloodLine)
	limit := before + int(d.Seconds()*linesPerSecond) + linesBurst + slack + 2*calls + fixture.FloodRecordEvery
	t.Logf("the server wrote %d lines in %v (%d before); the pace lets through %d", written, d, before, limit)
	if written > limit {
		t.Fatalf("the server wrote %d lines in %v, more than the pace lets through (%d)", written, d, limit)
	}
}

// floodedSoFar is the count of the last "flooded" event.
func floodedSoFar(t *testing.T, path string) int {
	t.Helper()
	evs, err := fixture.ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == fixture.EventFlooded {
			n = e.Count
		}
	}
	return n
}

// Each line written to a stdio server lets one line back without taking
// from the pace: a busy server's answers are not paced, its other lines are.
func TestAStdioServersAnswersTakeNothingFromThePace(t *testing.T) {
	const asked, extra = 2 * linesBurst, 10
	answers := strings.Repeat(`{"jsonrpc":"2.0","id":1,"result":{}}`+"\n", asked+extra)
	r, w := pacedStdio(io.NopCloser(strings.NewReader(answers)), nopWriteCloser{io.Discard}, nil)
	defer r.Close()
	if _, err := io.WriteString(w, strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n", asked)); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != answers {
		t.Fatalf("read %d bytes, %v; want the answers whole", len(got), err)
	}
	// Only the lines nobody asked for took from the pace.
	if left := r.(*pacedLines).pace.lines.Tokens(); left < linesBurst-extra {
		t.Fatalf("%.1f of the pace's %d lines left, want at least %d", left, linesBurst, linesBurst-extra)
	}
}

// A stdio server that leaves what it is sent unanswered does not save up
// more than maxStdioCredit lines to send back unpaced.
func TestAStdioServerSavesUpNoMoreThanTheCreditLimit(t *testing.T) {
	r, w := pacedStdio(io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, nil)
	defer r.Close()
	for range 3 * maxStdioCredit / 1024 {
		if _, err := io.WriteString(w, strings.Repeat(`{"jsonrpc":"2.0","method":"notifications/cancelled"}`+"\n", 1024)); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.(*pacedLines).credit.Load(); got != maxStdioCredit {
		t.Fatalf("%d lines may come back unpaced after %d unanswered, want %d", got, 3*maxStdioCredit, maxStdioCredit)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
