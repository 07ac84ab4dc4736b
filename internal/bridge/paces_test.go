package bridge

import (
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"
)

// The supervisors of a namespace hold one pace, those of another namespace
// another; the pace goes once the last of its namespace let it go, and
// letting go twice counts once.
func TestPacesHoldOnePacePerNamespace(t *testing.T) {
	paces := NewPaces()
	a1, letGoA1 := paces.hold("a")
	a2, letGoA2 := paces.hold("a")
	b, letGoB := paces.hold("b")
	if a1 != a2 || a1 == b {
		t.Fatalf("namespace a holds %p and %p, b %p: want one pace per namespace", a1, a2, b)
	}
	letGoA1()
	letGoA1()
	if a3, letGoA3 := paces.hold("a"); a3 != a1 {
		t.Fatalf("a pace still held by one was replaced")
	} else {
		letGoA3()
	}
	letGoA2()
	letGoB()
	if n := len(paces.byNS); n != 0 {
		t.Fatalf("%d namespaces' paces kept after every holder let go, want 0", n)
	}
	if a4, _ := paces.hold("a"); a4 == a1 {
		t.Fatalf("a pace let go by all came back")
	}
	var none *Paces
	if p1, _ := none.hold("a"); p1 == nil || p1 == a1 {
		t.Fatalf("a nil Paces gave %p, want a pace of its own", p1)
	}
}

// A supervisor that is disposed lets its namespace's pace go.
func TestADisposedSupervisorLetsItsNamespacesPaceGo(t *testing.T) {
	paces := NewPaces()
	s, _ := startSupervisor(t, stdioPolicy(), func(o *Options) { o.Paces = paces })
	waitFor(t, s, "Ready", isReady)
	if n := paces.Holders("ns"); n != 1 {
		t.Fatalf("the namespace's pace held by %d running supervisors, want 1", n)
	}
	if err := s.Dispose(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := paces.Holders("ns"); n != 0 {
		t.Fatalf("the namespace's pace held by %d after Dispose, want 0", n)
	}
}

// The events before the answers of calls to several servers of one
// namespace share one pace: each server's own would let a tenant multiply
// it by its servers, as calls in flight multiplied a stream's own.
func TestTheServersOfANamespaceShareOnePace(t *testing.T) {
	const servers, calls, events = 2, 4, 200
	event := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"
	paces := NewPaces()
	var sups []*Supervisor
	for i := range servers {
		up := floodBeforeAnswers(t, strings.Repeat(event, events))
		s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Paces, o.Name = paces, "srv"+strconv.Itoa(i) })
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
		start func(t *testing.T, paces func(*Options))
	}{
		{"the SDK's GET stream", func(t *testing.T, paces func(*Options)) {
			event := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"
			serveGETStreams(t, func(w http.ResponseWriter) {
				for {
					if _, err := io.WriteString(w, event); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}, paces)
		}},
		{"a Local stdio child", func(t *testing.T, paces func(*Options)) {
			startSupervisor(t, stdioPolicy("--flood-after=100ms"), paces)
		}},
		{"a Pod, through the tunnel", func(t *testing.T, paces func(*Options)) {
			sh := startPodShim(t, fixtureBin, "--flood-after=100ms", "--flood-lines=10000")
			pods := newTestPods()
			pods.set(readyPod("srv-mcp-1", "uid-1"), true)
			startPodSupervisor(t, podPolicy(), pods, sh.port, podToken, paces)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The namespace's pace counts lines and lets them all pass.
			shared := &pace{lines: rate.NewLimiter(math.SmallestNonzeroFloat64, plenty), bytes: rate.NewLimiter(rate.Inf, 0)}
			paces := NewPaces()
			paces.byNS["ns"] = &heldPace{pace: shared, holders: 1}
			tc.start(t, func(o *Options) { o.Paces = paces })
			NewWithT(t).Eventually(func() float64 { return plenty - shared.lines.Tokens() }, eventually).
				Should(BeNumerically(">", linesBurst), "lines taken from the namespace's pace")
		})
	}
}

// A paced reader with a shared pace takes every line it reads from it, and
// no byte; a stdio server's lines take from it only beyond their credit.
func TestASharedPaceTakesLinesOnly(t *testing.T) {
	const plenty, lines = 1 << 20, 300
	unlimited := func() *pace {
		return &pace{lines: rate.NewLimiter(rate.Inf, 0), bytes: rate.NewLimiter(rate.Inf, 0)}
	}
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
	r, w := pacedStdio(io.NopCloser(strings.NewReader(stream)), nopWriteCloser{io.Discard}, shared)
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
