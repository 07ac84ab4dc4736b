package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/registry"
)

// ---- the attacker ------------------------------------------------------------

type attack struct {
	done                      chan struct{}
	wg                        sync.WaitGroup
	sessionsOK, sessions429   atomic.Int64
	held, refusedBytes, calls atomic.Int64
	refusedCalls, otherErrors atomic.Int64
	forged401, forged429      atomic.Int64
	probes403, probes429      atomic.Int64
	heavyOK, heavy429         atomic.Int64
	heavyCut                  atomic.Int64 // a heavy request's connection closed before its answer was read
	heavyCutErr               atomic.Value // the first such error, a string
	handshakes                atomic.Int64 // lists answered on a new connection each
	firstToolError            atomic.Pointer[string]
}

func startAttack(url string) *attack {
	a := &attack{done: make(chan struct{})}
	if *flagDirect {
		toolPrefix = "" // the upstream's own names
	}
	for range *flagUnread {
		a.loop(func(hc *http.Client, i int) { a.unread(hc, url, i) })
	}
	if *flagDirect {
		return a // -control: the oversized calls alone
	}
	for range *flagSessions {
		a.loop(func(hc *http.Client, i int) { a.initialize(hc, url) })
	}
	if *flagHeavy > 0 {
		bodies := [2]string{heavyBody(false), heavyBody(true)}
		for k := range *flagHeavy {
			body := bodies[k/2%2] // small objects, refused once read; one string, which the SDK decodes
			step := func(hc *http.Client, i int) { a.heavy(hc, url, body) }
			if k%2 == 1 { // a connection's pause does not slow an agent that opens a new one each time
				a.loopFresh(step)
			} else {
				a.loop(step)
			}
		}
	}
	for range *flagHandshakers {
		a.loopFresh(func(hc *http.Client, i int) { a.handshake(hc, url) })
	}
	for range *flagFlooders {
		a.loop(func(hc *http.Client, i int) { a.flood(hc, url, i) })
	}
	if !*flagTokens {
		return a
	}
	for k := range *flagForgers {
		a.loopFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + k%250)}), func(hc *http.Client, i int) { a.forge(hc, url) })
	}
	probe := "Bearer " + os.Getenv(proberTokenEnv)
	for range *flagProbers {
		a.loop(func(hc *http.Client, i int) { a.probe(hc, url, i, probe) })
	}
	return a
}

// loop runs step until the attack stops, each loop on a connection of its own.
func (a *attack) loop(step func(*http.Client, int)) {
	a.loopFrom(netip.Addr{}, step)
}

// loopFresh is loop with a new connection for every request.
func (a *attack) loopFresh(step func(*http.Client, int)) {
	tr := agentTransport()
	tr.DisableKeepAlives = true
	a.loopOn(tr, netip.Addr{}, step)
}

// loopFrom is loop with connections from the loopback address src (any
// when it is not valid), which the gateway sees as the agent's address.
func (a *attack) loopFrom(src netip.Addr, step func(*http.Client, int)) {
	a.loopOn(agentTransport(), src, step)
}

func (a *attack) loopOn(tr *http.Transport, src netip.Addr, step func(*http.Client, int)) {
	a.wg.Go(func() {
		if src.IsValid() {
			d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
			tr.DialContext = d.DialContext
		}
		hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-a.done:
				return
			default:
			}
			step(hc, i)
		}
	})
}

func (a *attack) initialize(hc *http.Client, url string) {
	resp, err := post(hc, url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{},"clientInfo":{"name":"attacker","version":"0"}}}`, nil)
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		a.sessions429.Add(1)
	} else {
		a.sessionsOK.Add(1)
	}
}

// unread calls the slow 12 MiB tool and reads the answer or the refusal.
func (a *attack) unread(hc *http.Client, url string, i int) {
	resp, err := post(hc, url, callBody(i, fixtureBig, `{}`), callHeaders(fixtureBig))
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	// The gateway answers with a length; the upstream itself (-direct), an
	// SSE stream without one.
	if resp.ContentLength > 64<<10 || *flagDirect && resp.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.held.Add(1)
		return
	}
	a.countRefusal(resp)
}

// heavy lists tools with a request of nearly 4 MiB, the gateway's bound on
// a body, and counts the answers and the 429s.
func (a *attack) heavy(hc *http.Client, url, body string) {
	resp, err := post(hc, url, body, listHeaders())
	if err != nil {
		// The gateway answers a body it refuses unread and closes the
		// connection, which the client may meet while still sending.
		a.heavyCut.Add(1)
		a.heavyCutErr.CompareAndSwap(nil, err.Error())
		return
	}
	a.countStatus(resp, &a.heavyOK, http.StatusOK, &a.heavy429)
}

// heavyBody is a tools/list of nearly 4 MiB, whose _meta holds small
// objects (which the gateway refuses once it has counted them) or, with
// oneString, one string (a list the gateway serves, through the SDK).
func heavyBody(oneString bool) string {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{`)
	b.WriteString(`"io.modelcontextprotocol/protocolVersion":"` + registry.SessionlessProtocol + `","io.modelcontextprotocol/clientCapabilities":{},`)
	b.WriteString(`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"},"pad":`)
	if oneString {
		b.WriteString(`"` + strings.Repeat("x", 4<<20-1024) + `"}}}`)
		return b.String()
	}
	b.WriteByte('[')
	for i := 0; b.Len() < 4<<20-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"a":1,"b":[2,3]}`)
	}
	b.WriteString(`]}}}`)
	return b.String()
}

// handshake lists tools on a connection of its own (loopFresh): with
// -tls, what the gateway spends is mostly the handshake.
func (a *attack) handshake(hc *http.Client, url string) {
	resp, err := post(hc, url, listBody(1), listHeaders())
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	a.countStatus(resp, &a.handshakes, http.StatusOK, &a.otherErrors) // no budget refuses them
}

func (a *attack) flood(hc *http.Client, url string, i int) {
	resp, err := post(hc, url, callBody(i, "sleep", `{"ms":1000}`), callHeaders("sleep"))
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	a.countRefusal(resp)
}

// forge sends a request with a token never seen before, which only a
// TokenReview can refuse: 401 once reviewed, 429 when the reviews' limits
// refuse to ask.
func (a *attack) forge(hc *http.Client, url string) {
	resp, err := post(hc, url, listBody(1), map[string]string{"Authorization": "Bearer " + forgedToken(),
		"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/list"})
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	a.countStatus(resp, &a.forged401, http.StatusUnauthorized, &a.forged429)
}

// probe lists tools as an identity that may use no McpServer of the
// namespace: 403 once the reviews find none, 429 when the per-identity
// limit of reviews refuses to ask.
func (a *attack) probe(hc *http.Client, url string, i int, auth string) {
	resp, err := post(hc, url, listBody(i), map[string]string{"Authorization": auth,
		"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/list"})
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	a.countStatus(resp, &a.probes403, http.StatusForbidden, &a.probes429)
}

// countStatus counts resp in got when its status is want, in limited
// when it is 429, and as an other error otherwise.
func (a *attack) countStatus(resp *http.Response, got *atomic.Int64, want int, limited *atomic.Int64) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case want:
		got.Add(1)
	case http.StatusTooManyRequests:
		limited.Add(1)
	default:
		a.otherErrors.Add(1)
	}
}

// listHeaders are the headers of a sessionless tools/list.
func listHeaders() map[string]string {
	return map[string]string{"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/list"}
}

func listBody(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"}}}}`, id, registry.SessionlessProtocol)
}

func (a *attack) countRefusal(resp *http.Response) {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := string(b)
	switch {
	case strings.Contains(s, gateway.FlagMaxResultBytesPerNamespace):
		a.refusedBytes.Add(1)
	case strings.Contains(s, "-inflight-calls-"):
		a.refusedCalls.Add(1)
	case strings.Contains(s, `"result"`):
		a.calls.Add(1)
		if strings.Contains(s, `"isError":true`) {
			a.firstToolError.CompareAndSwap(nil, &s)
		}
	default:
		a.otherErrors.Add(1)
	}
}

func (a *attack) stop() {
	close(a.done)
	a.wg.Wait()
}

// attackCounts is what the attacker's agents got, as runAttacker prints it.
type attackCounts struct {
	SessionsOK, Sessions429, Held, RefusedBytes, RefusedCalls, Calls, OtherErrors int64
	Forged401, Forged429, Probes403, Probes429, HeavyOK, Heavy429, HeavyCut       int64
	Handshakes                                                                    int64
	FirstToolError, HeavyCutErr                                                   string
}

// runAttacker floods -url until its stdin closes, then prints what the
// attacker got.
func runAttacker() error {
	a := startAttack(*flagURL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	a.stop()
	c := attackCounts{SessionsOK: a.sessionsOK.Load(), Sessions429: a.sessions429.Load(), Held: a.held.Load(),
		RefusedBytes: a.refusedBytes.Load(), RefusedCalls: a.refusedCalls.Load(), Calls: a.calls.Load(),
		OtherErrors: a.otherErrors.Load(), Forged401: a.forged401.Load(), Forged429: a.forged429.Load(),
		Probes403: a.probes403.Load(), Probes429: a.probes429.Load(), HeavyOK: a.heavyOK.Load(), Heavy429: a.heavy429.Load(),
		HeavyCut: a.heavyCut.Load(), Handshakes: a.handshakes.Load()}
	c.HeavyCutErr, _ = a.heavyCutErr.Load().(string)
	if e := a.firstToolError.Load(); e != nil {
		c.FirstToolError = *e
	}
	return json.NewEncoder(os.Stdout).Encode(c)
}

const fixtureBig = "big"
