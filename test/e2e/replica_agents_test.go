package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/registry"
)

// callInterval is the agents' pause between two calls: "without pause", as
// an agent that works through a task calls its tools.
const callInterval = 20 * time.Millisecond

// serviceBalancer picks manager Pods for an agent as a Service would: each
// new TCP connection goes to a random ready endpoint of the gateway
// Service's EndpointSlices, and an open keep-alive connection stays where
// it is. The node has no kube-proxy, so the test does kube-proxy's part,
// following the slices as the endpoint controller updates them.
type serviceBalancer struct {
	ns, service string
	port        int32

	mu    sync.Mutex
	ready []string          // host:port of the ready endpoints
	pods  map[string]string // Pod name by endpoint address, of every endpoint seen
	// refused counts dials to an endpoint still listed ready that did not
	// connect, which the balancer then retried on another one.
	refused int
}

// startServiceBalancer follows the Service's EndpointSlices until ctx ends.
func startServiceBalancer(ctx context.Context, ns, service string, port int32) *serviceBalancer {
	GinkgoHelper()
	b := &serviceBalancer{ns: ns, service: service, port: port, pods: map[string]string{}}
	Eventually(func(ctx context.Context) ([]string, error) {
		return b.refresh(ctx)
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).ShouldNot(BeEmpty(), "ready endpoints of Service %s/%s", ns, service)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = b.refresh(ctx)
			}
		}
	}()
	return b
}

// refresh reads the ready endpoints from the Service's EndpointSlices.
func (b *serviceBalancer) refresh(ctx context.Context) ([]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := cluster.Client.List(ctx, &slices, client.InNamespace(b.ns),
		client.MatchingLabels{discoveryv1.LabelServiceName: b.service}); err != nil {
		return nil, err
	}
	var ready []string
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				addr := net.JoinHostPort(a, fmt.Sprint(b.port))
				if e.TargetRef != nil {
					b.pods[addr] = e.TargetRef.Name
				}
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready = append(ready, addr)
				}
			}
		}
	}
	b.ready = ready
	return ready, nil
}

// DialContext connects to a random ready endpoint, whatever addr says.
func (b *serviceBalancer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	var lastErr error
	for range 5 {
		b.mu.Lock()
		ready := b.ready
		b.mu.Unlock()
		if len(ready) == 0 {
			return nil, fmt.Errorf("service %s/%s has no ready endpoint", b.ns, b.service)
		}
		conn, err := d.DialContext(ctx, network, ready[rand.IntN(len(ready))])
		if err == nil {
			return conn, nil
		}
		lastErr = err
		b.mu.Lock()
		b.refused++
		b.mu.Unlock()
		if _, err := b.refresh(ctx); err != nil {
			return nil, err
		}
	}
	return nil, lastErr
}

// podAt names the manager Pod behind a connection's remote address.
func (b *serviceBalancer) podAt(addr string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.pods[addr]; ok {
		return p
	}
	return addr
}

func (b *serviceBalancer) refusedDials() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// httpClient is an agent's client for the gateway Service: TLS for the
// Service's name with the CA the manager published in ns, the token, and
// connections placed by the balancer.
func (b *serviceBalancer) httpClient(ctx context.Context, ns, token string) *http.Client {
	GinkgoHelper()
	pool := x509.NewCertPool()
	Eventually(func(g Gomega, ctx context.Context) {
		var cm corev1.ConfigMap
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: gatewayCAConfigMap}, &cm)).To(Succeed())
		g.Expect(pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"]))).To(BeTrue())
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed(), "the manager publishes its gateway CA in %s", ns)
	rt := &http.Transport{
		DialContext:     b.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: b.service + "." + b.ns + ".svc"},
		MaxIdleConns:    4,
	}
	return &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, rt)}
}

// url is the gateway Service's MCP endpoint for namespace ns.
func (b *serviceBalancer) url(ns string) string {
	return fmt.Sprintf("https://%s.%s.svc:%d/namespaces/%s/mcp", b.service, b.ns, b.port, ns)
}

// callFigures are what an agent saw over one phase of a spec.
type callFigures struct {
	ok, failed int
	failures   []string // the first few, with their time
	longestGap time.Duration
	// newSessions counts the sessions the agent had to open after its
	// first (2025-11-25 only).
	newSessions int
}

func (f callFigures) String() string {
	return fmt.Sprintf("%d ok, %d failed, longest gap without a successful call %s, %d new sessions",
		f.ok, f.failed, f.longestGap.Round(time.Millisecond), f.newSessions)
}

// agent calls one tool after the other, callInterval apart, until stopped,
// and keeps its figures per phase.
type agent struct {
	name   string
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	fig    callFigures
	lastOK time.Time
}

// callFunc makes call number i; a nil error is a successful call. opened
// is true when it had to open a new session first.
type callFunc func(ctx context.Context, i int) (opened bool, err error)

func startAgent(name string, call callFunc) *agent {
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{name: name, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for i := 0; ; i++ {
			callCtx, cancelCall := context.WithTimeout(ctx, 2*time.Minute)
			start := time.Now()
			opened, err := call(callCtx, i)
			cancelCall()
			if ctx.Err() != nil {
				return // stopped: the call was cut short, not failed
			}
			if err != nil {
				err = fmt.Errorf("after %s: %w", time.Since(start).Round(time.Millisecond), err)
			}
			a.record(opened, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(callInterval):
			}
		}
	}()
	return a
}

func (a *agent) record(opened bool, err error) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if opened {
		a.fig.newSessions++
	}
	if err != nil {
		a.fig.failed++
		if len(a.fig.failures) < 10 {
			a.fig.failures = append(a.fig.failures, now.Format("15:04:05.000")+" "+err.Error())
		}
		return
	}
	if !a.lastOK.IsZero() && now.Sub(a.lastOK) > a.fig.longestGap {
		a.fig.longestGap = now.Sub(a.lastOK)
	}
	a.lastOK, a.fig.ok = now, a.fig.ok+1
}

// phase returns the figures since the last phase and starts new ones.
func (a *agent) phase() callFigures {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.fig
	a.fig = callFigures{}
	return f
}

// succeeded is the number of successful calls of the current phase.
func (a *agent) succeeded() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fig.ok
}

func (a *agent) halt() {
	a.stop()
	<-a.done
}

// echoText is a text no other call of the agent echoes.
func echoText(agent string, i int) string { return fmt.Sprintf("%s-%d-end", agent, i) }

// sessionlessCaller makes 2026-07-28 calls: each a POST of its own, without
// a session, to any replica; a failure names the manager Pod it reached.
func sessionlessCaller(b *serviceBalancer, hc *http.Client, url string, tools []string) callFunc {
	return func(ctx context.Context, i int) (bool, error) {
		tool, text := tools[i%len(tools)], echoText("sessionless", i)
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":%q},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
			`"io.modelcontextprotocol/clientInfo":{"name":"e2e-sessionless","version":"0"}}}}`, i, tool, text, registry.SessionlessProtocol)
		remote := "no connection"
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
			remote = b.podAt(c.Conn.RemoteAddr().String())
		}})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", registry.SessionlessProtocol)
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
		resp, err := hc.Do(req)
		if err != nil {
			return false, fmt.Errorf("%s at %s: %w", tool, remote, err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(text)) || bytes.Contains(out, []byte(`"isError":true`)) {
			return false, fmt.Errorf("%s at %s: HTTP %d, %v: %.300s", tool, remote, resp.StatusCode, err, out)
		}
		return false, nil
	}
}

// sessionCaller makes 2025-11-25 calls in one go-sdk session, opening a new
// one only when the gateway no longer knows it; end closes the session once
// the agent has halted.
func sessionCaller(hc *http.Client, url string, tools []string) (call callFunc, end func()) {
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-session", Version: "test"}, nil)
	var sess *mcp.ClientSession
	end = func() {
		if sess != nil {
			_ = sess.Close()
		}
	}
	return func(ctx context.Context, i int) (opened bool, err error) {
		if sess == nil {
			sess, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc},
				&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				sess = nil
				return i > 0, fmt.Errorf("initialize: %w", err)
			}
			opened = i > 0
			if v := sess.InitializeResult().ProtocolVersion; v != "2025-11-25" {
				return opened, fmt.Errorf("the gateway negotiated %s", v)
			}
		}
		tool, text := tools[i%len(tools)], echoText("session", i)
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
		if errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) {
			_ = sess.Close()
			sess = nil
		}
		if err != nil {
			return opened, fmt.Errorf("%s: %w", tool, err)
		}
		if got := texts(res.Content); res.IsError || len(got) != 1 || got[0] != text {
			return opened, fmt.Errorf("%s: result (isError %t) %q, want %q", tool, res.IsError, got, text)
		}
		return opened, nil
	}, end
}

// texts are the texts of a result's content, a placeholder for other kinds.
func texts(content []mcp.Content) []string {
	var out []string
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			out = append(out, t.Text)
		} else {
			out = append(out, fmt.Sprintf("<%T>", c))
		}
	}
	return out
}
