package main

// The agents and the Service-like balancer they reach the replicas
// through.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
)

// balancer sends each new TCP connection to a random replica among those
// whose /readyz answered 200 at its last look (every 100 ms), as a
// Service's endpoints do; a kept-alive connection stays where it is until
// its server closes it.
type balancer struct {
	mu      sync.Mutex
	members []*replica
	ready   []*replica
	stop    chan struct{}
	done    chan struct{}
}

func newBalancer() *balancer {
	lb := &balancer{stop: make(chan struct{}), done: make(chan struct{})}
	go lb.watch()
	return lb
}

func (lb *balancer) add(r *replica) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.members = append(lb.members, r)
}

func (lb *balancer) close() {
	close(lb.stop)
	<-lb.done
}

func (lb *balancer) watch() {
	defer close(lb.done)
	hc := &http.Client{Timeout: time.Second}
	for {
		lb.mu.Lock()
		members := slices.Clone(lb.members)
		lb.mu.Unlock()
		var ready []*replica
		for _, r := range members {
			if readyz(hc, r.probes) {
				ready = append(ready, r)
			}
		}
		lb.mu.Lock()
		lb.ready = ready
		lb.mu.Unlock()
		select {
		case <-lb.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// client dials a ready replica's gateway for each new connection.
func (lb *balancer) client() *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		lb.mu.Lock()
		ready := slices.Clone(lb.ready)
		lb.mu.Unlock()
		if len(ready) == 0 {
			return nil, errors.New("no ready replica")
		}
		return d.DialContext(ctx, network, ready[rand.IntN(len(ready))].gateway)
	}}}
}

// endpoint is the tenant's MCP endpoint: a loopback Host (authentication is
// off); the balancer picks the address.
const endpoint = "http://127.0.0.1:1/namespaces/" + tenant + "/mcp"

// phaseStats is one agent's figures in one phase.
type phaseStats struct {
	ok, failed  int
	gap         time.Duration // longest time without a successful call
	newSessions int
	firstErrors []string
	// Of failed, the calls that started after a replica was killed, and of
	// those, the ones whose error names the killed replica's address: sent
	// over a connection the agent's HTTP client had kept to it.
	failedAfterKill, failedAfterKillOnItsConn int
}

// agent calls the tenant's servers' echo tools one after another, without
// pause, and counts per phase.
type agent struct {
	name     string
	protocol string
	offset   int

	mu      sync.Mutex
	phase   string
	stats   map[string]*phaseStats
	last    time.Time // the last success, or the phase's start
	cancel  context.CancelFunc
	done    chan struct{}
	session string
	// killedAt and killedAddr: the SIGKILL's time and the killed
	// replica's gateway address, once it happened.
	killedAt   time.Time
	killedAddr string
}

func newAgent(name, protocol string, offset int) *agent {
	return &agent{name: name, protocol: protocol, offset: offset, stats: map[string]*phaseStats{}, done: make(chan struct{})}
}

// setPhase starts counting into phase; the gap runs on from the last
// success, so a gap across the boundary is charged to the phase it ends in.
func (a *agent) setPhase(phase string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.phase = phase
	if a.stats[phase] == nil {
		a.stats[phase] = &phaseStats{}
	}
}

// killed tells the agent that the replica at addr was killed at t.
func (a *agent) killed(t time.Time, addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.killedAt, a.killedAddr = t, addr
}

func (a *agent) record(err error, newSession bool, started time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.stats[a.phase]
	now := time.Now()
	if newSession {
		st.newSessions++
	}
	if err != nil {
		st.failed++
		if !a.killedAt.IsZero() && started.After(a.killedAt) {
			st.failedAfterKill++
			if strings.Contains(err.Error(), a.killedAddr) {
				st.failedAfterKillOnItsConn++
			}
		}
		if len(st.firstErrors) < 3 {
			st.firstErrors = append(st.firstErrors, fmt.Sprintf("%.200s", err.Error()))
		}
		return
	}
	st.ok++
	st.gap = max(st.gap, now.Sub(a.last))
	a.last = now
}

// closeGap charges the time since the last success to the current phase
// when it ends.
func (a *agent) closeGap() {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.stats[a.phase]
	st.gap = max(st.gap, time.Since(a.last))
}

func (a *agent) stop() {
	a.cancel()
	<-a.done
}

// tool is the agent's i-th call's tool: every server in turn, each agent
// from its own offset.
func (a *agent) tool(i int) string {
	return "mcp__" + serverName((a.offset+i)%*flagServers) + "__echo"
}

// start runs the agent's loop: a 2025-11-25 agent on one go-sdk session,
// opening a new one only when its session is gone; a 2026-07-28 agent with
// a request per call.
func (a *agent) start(lb *balancer) error {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	var call func(context.Context, int) (bool, error)
	switch a.protocol {
	case "2025-11-25":
		c, err := newSessionCaller(ctx, lb)
		if err != nil {
			cancel()
			return err
		}
		a.session = c.cs.ID()
		call = func(ctx context.Context, i int) (bool, error) { return c.call(ctx, a.tool(i)) }
	default:
		hc := lb.client()
		call = func(ctx context.Context, i int) (bool, error) { return false, sessionlessCall(ctx, hc, i, a.tool(i)) }
	}
	a.mu.Lock()
	a.last = time.Now()
	a.mu.Unlock()
	go func() {
		defer close(a.done)
		for i := 0; ctx.Err() == nil; i++ {
			started := time.Now()
			cctx, ccancel := context.WithTimeout(ctx, *flagCallTimeout)
			renewed, err := call(cctx, i)
			ccancel()
			if ctx.Err() != nil {
				return
			}
			a.record(err, renewed, started)
		}
	}()
	return nil
}

// sessionCaller is a 2025-11-25 agent's session, replaced by a new one
// (counted) when the SDK says the old one is gone.
type sessionCaller struct {
	lb *balancer
	cs *mcp.ClientSession
}

func connect(ctx context.Context, lb *balancer) (*mcp.ClientSession, error) {
	agent := mcp.NewClient(&mcp.Implementation{Name: "bench-agent", Version: "v0"}, nil)
	// The SDK's default retries, as agents run it.
	return agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: lb.client()},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

func newSessionCaller(ctx context.Context, lb *balancer) (*sessionCaller, error) {
	cs, err := connect(ctx, lb)
	if err != nil {
		return nil, err
	}
	return &sessionCaller{lb: lb, cs: cs}, nil
}

// call makes one call; renewed says it opened a new session first.
func (c *sessionCaller) call(ctx context.Context, tool string) (renewed bool, err error) {
	if c.cs == nil {
		cs, err := connect(ctx, c.lb)
		if err != nil {
			return false, fmt.Errorf("new session: %w", err)
		}
		c.cs, renewed = cs, true
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
	switch {
	case errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed):
		_ = c.cs.Close()
		c.cs = nil // the next call opens a new session
		return renewed, err
	case err != nil:
		return renewed, err
	case res.IsError:
		return renewed, errors.New("tool error: " + contentText(res))
	}
	return renewed, nil
}

func contentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sessionlessCall posts one 2026-07-28 tools/call, its version and client
// in _meta.
func sessionlessCall(ctx context.Context, hc *http.Client, id int, tool string) error {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"still here"},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"bench-agent","version":"0"}}}}`, id, tool, registry.SessionlessProtocol)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", registry.SessionlessProtocol)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "still here") || strings.Contains(string(b), `"isError":true`) {
		return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}
