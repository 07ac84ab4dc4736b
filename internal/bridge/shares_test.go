package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"

	"github.com/mcpbridge/operator/test/fixture"
)

// The supervisors of a namespace hold one share, those of another namespace
// another; the share goes once the last of its namespace let it go, and
// letting go twice counts once.
func TestSharesHoldOneSharePerNamespace(t *testing.T) {
	shares := NewShares()
	a1, letGoA1 := shares.hold("a")
	a2, letGoA2 := shares.hold("a")
	b, letGoB := shares.hold("b")
	if a1 != a2 || a1 == b {
		t.Fatalf("namespace a holds %p and %p, b %p: want one share per namespace", a1, a2, b)
	}
	letGoA1()
	letGoA1()
	if a3, letGoA3 := shares.hold("a"); a3 != a1 {
		t.Fatalf("a share still held by one was replaced")
	} else {
		letGoA3()
	}
	letGoA2()
	letGoB()
	if n := len(shares.byNS); n != 0 {
		t.Fatalf("%d namespaces' shares kept after every holder let go, want 0", n)
	}
	if a4, _ := shares.hold("a"); a4 == a1 {
		t.Fatalf("a share let go by all came back")
	}
	var none *Shares
	if own, _ := none.hold("a"); own == nil || own == a1 || own.pace == nil || own.reading == nil {
		t.Fatalf("a nil Shares gave %+v, want a share of its own", own)
	}
}

// A supervisor that is disposed lets its namespace's share go.
func TestADisposedSupervisorLetsItsNamespacesShareGo(t *testing.T) {
	shares := NewShares()
	s, _ := startSupervisor(t, stdioPolicy(), func(o *Options) { o.Shares = shares })
	waitFor(t, s, "Ready", isReady)
	if n := shares.Holders("ns"); n != 1 {
		t.Fatalf("the namespace's share held by %d running supervisors, want 1", n)
	}
	if err := s.Dispose(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := shares.Holders("ns"); n != 0 {
		t.Fatalf("the namespace's share held by %d after Dispose, want 0", n)
	}
}

// The events before the answers of calls to several servers of one
// namespace share one pace: each server's own would let a tenant multiply
// it by its servers, as calls in flight multiplied a stream's own.
func TestTheServersOfANamespaceShareOnePace(t *testing.T) {
	const servers, calls, events = 2, 4, 200
	event := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"
	shares := NewShares()
	var sups []*Supervisor
	for i := range servers {
		up := floodBeforeAnswers(t, strings.Repeat(event, events))
		s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Shares, o.Name = shares, "srv"+strconv.Itoa(i) })
		waitFor(t, s, "Ready", isReady)
		sups = append(sups, s)
	}
	d := callsAfterTheFlood(t, calls, sups...)
	// One server's calls alone pass in 0.2 s at the pace; all of them at
	// one pace take 1.4 s. A tenth less, as in
	// TestTheEventsBeforeManyAnswersShareOnePace.
	lines := servers * calls * events * strings.Count(event, "\n")
	if least := time.Duration(lines-othersLinesBurst) * time.Second / othersLinesPerSecond * 9 / 10; d < least {
		t.Fatalf("%d servers' %d lines before their answers read in %v, want at least %v", servers, lines, d, least)
	}
}

// Every other stream a server floods takes its lines from its namespace's
// pace too, besides its own: the SDK's GET stream, a Local stdio child's
// output and a Pod's through the tunnel (each stream's own pace alone, a
// tenant's many servers would multiply it).
func TestEveryStreamOfAServerTakesLinesFromItsNamespacesPace(t *testing.T) {
	const plenty = 1 << 30
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, share func(*Options))
	}{
		{"the SDK's GET stream", func(t *testing.T, share func(*Options)) {
			event := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"
			serveGETStreams(t, func(w http.ResponseWriter) {
				for {
					if _, err := io.WriteString(w, event); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}, share)
		}},
		{"a Local stdio child", func(t *testing.T, share func(*Options)) {
			startSupervisor(t, stdioPolicy("--flood-after=100ms"), share)
		}},
		{"a Pod, through the tunnel", func(t *testing.T, share func(*Options)) {
			sh := startPodShim(t, fixtureBin, "--flood-after=100ms", "--flood-lines=10000")
			pods := newTestPods()
			pods.set(readyPod("srv-mcp-1", "uid-1"), true)
			startPodSupervisor(t, podPolicy(), pods, sh.port, podToken, share)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The namespace's pace counts lines and lets them all pass.
			shared := &pace{lines: rate.NewLimiter(math.SmallestNonzeroFloat64, plenty), bytes: rate.NewLimiter(rate.Inf, 0)}
			shares := NewShares()
			shares.byNS["ns"] = &share{pace: shared, reading: &readPool{max: readingBudget}, holders: 1}
			tc.start(t, func(o *Options) { o.Shares = shares })
			NewWithT(t).Eventually(func() float64 { return plenty - shared.lines.Tokens() }, eventually).
				Should(BeNumerically(">", linesBurst), "lines taken from the namespace's pace")
		})
	}
}

// A paced reader with a shared pace takes every line it reads from it, and
// no byte; a stdio server's lines take from it only beyond their credit.
func TestASharedPaceTakesLinesOnly(t *testing.T) {
	const plenty, lines = 1 << 20, 300
	counting := func() *pace {
		return &pace{lines: rate.NewLimiter(math.SmallestNonzeroFloat64, plenty), bytes: rate.NewLimiter(math.SmallestNonzeroFloat64, plenty)}
	}
	stream := strings.Repeat("x\n", lines)

	shared := counting()
	p := pacedReader{r: strings.NewReader(stream), ctx: context.Background(), pace: unlimited(), shared: shared}
	if _, err := io.ReadAll(&p); err != nil {
		t.Fatal(err)
	}
	if got, bytes := plenty-shared.lines.Tokens(), plenty-shared.bytes.Tokens(); got < lines || bytes > 0 {
		t.Fatalf("a stream of %d lines took %.0f lines and %.0f bytes from the shared pace, want %d and 0", lines, got, bytes, lines)
	}

	shared = counting()
	r, w := pacedStdio(io.NopCloser(strings.NewReader(stream)), nopWriteCloser{io.Discard}, &share{pace: shared, reading: &readPool{max: readingBudget}})
	r.(*pacedLines).pace = unlimited()
	if _, err := io.WriteString(w, strings.Repeat("{}\n", 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if got := plenty - shared.lines.Tokens(); got < lines-100 || got > lines-100+1 {
		t.Fatalf("%d stdio lines, 100 of them credited, took %.0f lines from the shared pace, want %d", lines, got, lines-100)
	}
}

// The bytes of a message being read come back to the namespace's budget
// once the message ends: an SSE event at its blank line, a stdio message
// at its line's end, a JSON answer only at its close; a read beyond the
// budget fails, naming it, and a closed lease takes nothing more.
func TestEventBytesComeBackWhenTheirMessageEnds(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lines, whole bool
		max          int64
		chunks       []string
		held         int64 // after the chunks
		refused      bool
	}{
		{name: "SSE events", chunks: []string{"data: abc\n", "\n", "data: x"}, held: 7},
		{name: "an event split across reads", chunks: []string{"data: a", "bc\n\ndata: de", "f\n"}, held: 10},
		{name: "a blank line of CRLF", chunks: []string{"data: abc\r\n\r", "\n"}, held: 0},
		{name: "comment lines until a blank line", chunks: []string{": x\n: y\n"}, held: 8},
		{name: "stdio lines", lines: true, chunks: []string{"abc\nde"}, held: 2},
		{name: "a JSON answer until its close", whole: true, chunks: []string{"{\n\n", "}"}, held: 4},
		{name: "an event beyond the budget, which gives back what it held", max: 10, chunks: []string{"data: 0123", "456789\n"}, held: 0, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &readPool{max: cmpOr(tc.max, 1<<20)}
			e := eventBytes{lease: pool.lease(), lines: tc.lines, whole: tc.whole}
			var err error
			for _, c := range tc.chunks {
				if err = e.add([]byte(c)); err != nil {
					break
				}
			}
			if refused := err != nil; refused != tc.refused || (refused && !strings.Contains(err.Error(), "budget held at once")) {
				t.Fatalf("add: %v, want refused %v", err, tc.refused)
			}
			if got := pool.held.Load(); got != tc.held {
				t.Fatalf("%d bytes held, want %d", got, tc.held)
			}
			e.lease.close()
			if got := pool.held.Load(); got != 0 || e.lease.Take(1) {
				t.Fatalf("closed: %d bytes held, and a take allowed; want none", got)
			}
		})
	}
}

func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

// stalledBefore serves the fixture, except that its answer to each request
// of method is an SSE stream that begins with a notification of about pad
// bytes; with hold, the first of these streams stops halfway through that
// notification until release is closed, once it has written its pad
// (written is closed then).
type stalledBefore struct {
	method  string
	pad     int
	hold    bool
	release chan struct{}
	written chan struct{}
	stalls  sync.Once
}

func (sb *stalledBefore) serve(t *testing.T) *httpUpstream {
	fx := httpFixture(t, fixture.Options{})
	sb.release, sb.written = make(chan struct{}), make(chan struct{})
	return httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &msg) != nil || msg.Method != sb.method {
			fx.ServeHTTP(w, r)
			return
		}
		answer := httptest.NewRecorder()
		fx.ServeHTTP(answer, r)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\""+strings.Repeat("x", sb.pad))
		w.(http.Flusher).Flush()
		stall := false
		sb.stalls.Do(func() { stall = sb.hold })
		if stall {
			close(sb.written)
			select {
			case <-sb.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "\"}}\n\n")
		if mediaType(answer.Header().Get("Content-Type")) == "text/event-stream" {
			_, _ = w.Write(answer.Body.Bytes())
			return
		}
		_, _ = io.WriteString(w, "event: message\ndata: "+strings.TrimSpace(answer.Body.String())+"\n\n")
	}))
}

// Calls on the SDK's path whose streams would hold more than the
// namespace's budget of bytes being read fail at once, and the call that
// holds its share completes: without the budget, each stream would hold
// its message of up to 16 MiB (32 such calls took a test's heap to 1.5 GiB).
func TestCallsBeyondTheReadingBudgetFail(t *testing.T) {
	sb := &stalledBefore{method: "tools/call", pad: 600 << 10, hold: true}
	up := sb.serve(t)
	shares := NewShares()
	shares.reading = 1 << 20 // one stream's 600 KiB, not two
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Shares = shares })
	waitFor(t, s, "Ready", isReady)
	held := func() int64 { return shares.byNS["ns"].reading.held.Load() }
	// CallTool is the SDK's path: the SDK reads its stream.
	call := func() error {
		_, err := s.CallTool(context.Background(), fixture.ToolEcho, map[string]any{"text": "x"})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- call() }()
	g := NewWithT(t)
	g.Eventually(held, eventually).Should(BeNumerically(">=", sb.pad), "the first call's stream holds its notification")
	for range 3 {
		g.Expect(call()).To(MatchError(ContainSubstring("budget held at once (1 MiB)")), "a call whose stream would pass the budget")
	}
	close(sb.release)
	g.Expect(<-first).To(Succeed(), "the call that held its share")
	g.Eventually(held, eventually).Should(BeZero(), "bytes held once every stream ended")
	g.Eventually(call, eventually).Should(Succeed(), "a call once the budget came back")
}

// A tools/list page that would pass the namespace's budget of bytes being
// read fails its attempt, naming the budget, while another server of the
// namespace holds it; once that one's page is read, the attempt after
// succeeds.
func TestAToolListBeyondTheReadingBudgetIsTriedAgain(t *testing.T) {
	shares := NewShares()
	shares.reading = 1 << 20
	holding := &stalledBefore{method: "tools/list", pad: 600 << 10, hold: true}
	a, _ := startSupervisor(t, httpPolicy(holding.serve(t).URL()), func(o *Options) { o.Shares, o.Name = shares, "a" })
	NewWithT(t).Eventually(func() int64 { return shares.byNS["ns"].reading.held.Load() }, eventually).
		Should(BeNumerically(">=", holding.pad), "a's page holds its notification")
	other := &stalledBefore{method: "tools/list", pad: 600 << 10}
	b, _ := startSupervisor(t, httpPolicy(other.serve(t).URL()), func(o *Options) { o.Shares, o.Name = shares, "b" })
	waitFor(t, b, "the budget in lastError", func(sn Snapshot) bool {
		return sn.LastError != nil && strings.Contains(sn.LastError.Message(), "budget held at once (1 MiB)")
	})
	close(holding.release)
	waitFor(t, a, "Ready", isReady)
	waitFor(t, b, "Ready", isReady)
}

// A stdio server's line counts against the namespace's budget of bytes
// being read until it ends: a line beyond it fails the read, naming it, and
// none of its bytes are handed on (a reader hands on the bytes that come
// with an error); nothing stays held.
func TestAStdioLineBeyondTheReadingBudgetFails(t *testing.T) {
	pool := &readPool{max: 100}
	first, second := strings.Repeat("x", 50)+"\n", strings.Repeat("y", 200)+"\n"
	r, _ := pacedStdio(io.NopCloser(io.MultiReader(strings.NewReader(first), strings.NewReader(second))), nopWriteCloser{io.Discard},
		&share{pace: unlimited(), reading: pool})
	r.(*pacedLines).pace = unlimited()
	got, err := io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "budget held at once (100 bytes)") || string(got) != first {
		t.Fatalf("read %q, %v; want the first line only, then the budget's refusal", got, err)
	}
	_ = r.Close()
	if n := pool.held.Load(); n != 0 {
		t.Fatalf("%d bytes held after the close, want 0", n)
	}
}

// A stdio server whose tool list passes the namespace's budget of bytes
// being read fails its attempt, and lastError names the budget.
func TestAStdioServerBeyondTheReadingBudgetNamesItInLastError(t *testing.T) {
	shares := NewShares()
	shares.reading = 1 << 10 // less than the fixture's tools/list line
	s, _ := startSupervisor(t, stdioPolicy(), func(o *Options) { o.Shares = shares })
	waitFor(t, s, "the budget in lastError", func(sn Snapshot) bool {
		return sn.LastError != nil && strings.Contains(sn.LastError.Message(), "budget held at once (1 KiB)")
	})
}

// unlimited is a pace that lets everything pass at once.
func unlimited() *pace {
	return &pace{lines: rate.NewLimiter(rate.Inf, 0), bytes: rate.NewLimiter(rate.Inf, 0)}
}
