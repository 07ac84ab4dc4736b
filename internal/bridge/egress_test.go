package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/test/fixture"
)

// The egress policy of Streamable HTTP upstreams.
// See docs/design.md, "Egress policy".

// httpServeOn serves h on a listener of network (tcp4 or tcp6) at addr.
func httpServeOn(t *testing.T, network, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func portOf(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func TestEgressRefusesAndNamesTheAddress(t *testing.T) {
	var reached atomic.Int32
	count := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1); h.ServeHTTP(w, r) })
	}
	v4 := httpServeOn(t, "tcp4", "127.0.0.1:0", count(httpFixture(t, fixture.Options{})))
	v6 := httpServeOn(t, "tcp6", "[::1]:0", count(httpFixture(t, fixture.Options{})))
	p4, p6 := portOf(t, v4), portOf(t, v6)
	// The loopback cases run first: should the guard not be in the dial
	// path at all, they fail and the test stops before it would aim at an
	// address off this machine. Once it is in the path, its dial hook fails
	// the test instead of dialling anything the policy wrongly allows.
	cases := []struct {
		name, url, refused, class string
	}{
		{"a name that resolves to loopback", "http://localhost:" + p4 + "/mcp", "127.0.0.1:" + p4, "loopback"},
		{"IPv6 loopback", "http://[::1]:" + p6 + "/mcp", "[::1]:" + p6, "loopback"},
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:" + p4 + "/mcp", "127.0.0.1:" + p4, "loopback"},
		{"unspecified", "http://0.0.0.0:" + p4 + "/mcp", "0.0.0.0:" + p4, "unspecified"},
		{"cloud metadata", "http://169.254.169.254/latest/mcp", "169.254.169.254:80", "link-local"},
		{"multicast", "http://[ff02::1]:80/mcp", "[ff02::1]:80", "multicast"},
	}
	for i, tc := range cases {
		if i == 4 && t.Failed() {
			t.Fatal("the egress guard did not refuse loopback: not trying destinations off this machine")
		}
		t.Run(tc.name, func(t *testing.T) {
			s, reg := startSupervisor(t, httpPolicy(tc.url), func(o *Options) { o.Egress = loopbackEgress(t) })
			sn := waitFor(t, s, "a refused attempt", func(sn Snapshot) bool { return sn.LastError != nil && sn.FailedAttempts >= 1 })
			g := NewWithT(t)
			g.Expect(sn.LastError.Stage).To(Equal(StageTransportStart))
			g.Expect(sn.LastError.Message()).To(Equal("Refused to connect to " + tc.refused + ": " + tc.class +
				" addresses are not allowed for upstreams; an administrator can allow them with --upstream-allow-cidrs"))
			g.Expect(sn.Phase).To(Equal(v1alpha1.PhaseConnecting), "a refusal is a failed attempt, retried like any other")
			g.Expect(reg.Tools("ns")).To(BeEmpty())
		})
	}
	NewWithT(t).Expect(reached.Load()).To(BeZero(), "no request reached a refused upstream")
}

func TestEgressDefaultsToRefusingWithoutAPolicy(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	// Loopback only: safe to dial even if the default were broken.
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Egress = nil })
	sn := waitFor(t, s, "a refused attempt", func(sn Snapshot) bool { return sn.LastError != nil })
	NewWithT(t).Expect(sn.LastError.Error()).To(HavePrefix("Refused to connect to 127.0.0.1:"))
	NewWithT(t).Expect(up.requests()).To(BeEmpty(), "nothing reached the upstream")
}

func TestEgressAllowListConnectsLoopback(t *testing.T) {
	v4 := httpServeOn(t, "tcp4", "127.0.0.1:0", httpFixture(t, fixture.Options{}))
	v6 := httpServeOn(t, "tcp6", "[::1]:0", httpFixture(t, fixture.Options{}))
	for _, url := range []string{
		"http://localhost:" + portOf(t, v4) + "/mcp",
		"http://[::1]:" + portOf(t, v6) + "/mcp",
	} {
		s, reg := startSupervisor(t, httpPolicy(url), func(o *Options) { o.Egress = loopbackEgress(t, "127.0.0.0/8", "::1/128") })
		waitFor(t, s, "Ready", isReady)
		NewWithT(t).Expect(toolNames(reg.Tools("ns"))).To(ContainElement("mcp__fx__echo"))
	}
	// 127.0.0.0/8 alone leaves the IPv6 loopback refused.
	s, _ := startSupervisor(t, httpPolicy("http://[::1]:"+portOf(t, v6)+"/mcp"),
		func(o *Options) { o.Egress = loopbackEgress(t, "127.0.0.0/8") })
	sn := waitFor(t, s, "a refused attempt", func(sn Snapshot) bool { return sn.LastError != nil })
	NewWithT(t).Expect(sn.LastError.Message()).To(HavePrefix("Refused to connect to [::1]:"))
}

// TestEgressGuardsTheJSONFastPath: tool calls posted as JSON by the
// supervisor itself dial through the same guarded transport as the SDK.
func TestEgressGuardsTheJSONFastPath(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	var dials, refuse atomic.Int32
	allow, _ := egress.ParseCIDRs("127.0.0.0/8")
	policy := egress.New(allow).WithDialHook(func(network, address string) error {
		dials.Add(1)
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("dialled %s", address)
			return errors.New("test: never dial a non-loopback address")
		}
		if refuse.Load() != 0 {
			return errors.New("test: refused by the dial hook")
		}
		return nil
	})
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Egress = policy })
	waitFor(t, s, "Ready", isReady)
	g := NewWithT(t)

	s.mu.Lock()
	hl := s.live.link.(*httpLink)
	s.mu.Unlock()
	hl.inline.CloseIdleConnections() // the call below has to dial
	refuse.Store(1)
	before := dials.Load()
	_, _, err := s.CallToolJSON(context.Background(), "echo", json.RawMessage(`{"text":"x"}`))
	g.Expect(err).To(MatchError(ContainSubstring("refused by the dial hook")))
	g.Expect(dials.Load()).To(BeNumerically(">", before))
}

// TestEgressNeverFollowsARedirect: a redirect to a refused address is not
// followed, so the address is never dialled (the dial hook would fail the
// test) and the configured headers never reach it.
func TestEgressNeverFollowsARedirect(t *testing.T) {
	var redirected atomic.Int32
	up := httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Add(1)
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusTemporaryRedirect)
	}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()), func(o *Options) { o.Egress = loopbackEgress(t, "127.0.0.0/8") })
	sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.LastError != nil && sn.FailedAttempts >= 1 })
	g := NewWithT(t)
	g.Expect(redirected.Load()).To(BeNumerically(">=", 1))
	g.Expect(sn.LastError.Stage).To(Equal(StageInitialize), "the redirect answer fails the handshake; nothing else is dialled")
	g.Expect(strings.Contains(sn.LastError.Message(), "Refused")).To(BeFalse())
}
