package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/mcpbridge/operator/internal/egress"
)

// fakeOwners answers from a map and records every address it is asked.
type fakeOwners struct {
	mu    sync.Mutex
	of    map[string][]egress.Owner
	fail  map[string]error
	asked []string
}

func (f *fakeOwners) Owners(_ context.Context, a netip.Addr) ([]egress.Owner, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, a.String())
	if err := f.fail[a.String()]; err != nil {
		return nil, err
	}
	return f.of[a.String()], nil
}

func (f *fakeOwners) wasAsked(a string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.asked {
		if x == a {
			return true
		}
	}
	return false
}

func pod(ns, name string) egress.Owner { return egress.Owner{Kind: "Pod", Namespace: ns, Name: name} }
func service(ns, name string) egress.Owner {
	return egress.Owner{Kind: "Service", Namespace: ns, Name: name}
}

// tenants: namespace "a" asks; "b" is another tenant.
func tenants() *fakeOwners {
	return &fakeOwners{
		of: map[string][]egress.Owner{
			"10.244.0.5":   {pod("a", "mine")},
			"10.96.0.20":   {service("a", "mine")},
			"10.244.0.6":   {pod("b", "theirs")},
			"10.96.0.10":   {service("b", "theirs")},
			"10.244.0.7":   {pod("a", "host-net"), pod("b", "host-net")},
			"fd00:10::6":   {pod("b", "theirs-v6")},
			"192.168.9.9":  {service("b", "outside-the-ranges")},
			"100.64.0.1":   {pod("b", "theirs")},
			"10.244.0.100": nil,
		},
		fail: map[string]error{"10.244.0.8": errors.New(`pods is forbidden: cannot list resource "pods"`)},
	}
}

var clusterRanges = []netip.Prefix{
	netip.MustParsePrefix("10.244.0.0/16"),
	netip.MustParsePrefix("10.96.0.0/12"),
	netip.MustParsePrefix("fd00:10::/64"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

const otherNamespace = "it is the address of a Pod or Service in another namespace than the McpServer's"

func TestClusterRule(t *testing.T) {
	cases := []struct {
		addr   string
		reason string // "" allowed; a substring of the refusal otherwise
		lookup bool   // the owners were asked
	}{
		{"10.244.0.5", "", true},   // own Pod
		{"10.96.0.20", "", true},   // own Service
		{"10.244.0.100", "", true}, // nobody's
		{"8.8.8.8", "", false},     // outside the ranges: never looked up
		{"192.168.9.9", "", false}, // outside the declared ranges, whoever has it
		{"10.244.0.6", otherNamespace, true},
		{"10.96.0.10", otherNamespace, true},
		{"::ffff:10.96.0.10", otherNamespace, true}, // mapped: looked up as the IPv4 address
		{"fd00:10::6", otherNamespace, true},
		{"10.244.0.7", otherNamespace, true}, // shared with another namespace
		{"10.244.0.8", "could not be told (pods is forbidden", true},
		{"100.100.100.200", "metadata addresses", false}, // the class rule first, inside a range too
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			owners := tenants()
			p := egress.Default().WithCluster(clusterRanges, owners)
			err := p.Check(context.Background(), "a", netip.MustParseAddr(tc.addr))
			if tc.reason == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.reason != "" {
				var r *egress.RefusedError
				if !errors.As(err, &r) || !strings.Contains(r.Error(), tc.reason) ||
					!strings.HasSuffix(r.Error(), "; an administrator can allow it with --upstream-allow-cidrs") &&
						!strings.HasSuffix(r.Error(), "; an administrator can allow them with --upstream-allow-cidrs") {
					t.Fatalf("err = %v, want a refusal containing %q that names the flag", err, tc.reason)
				}
				if strings.Contains(r.Error(), "theirs") || strings.Contains(r.Error(), `"b"`) {
					t.Errorf("the refusal names another tenant's object: %v", r)
				}
			}
			unmapped := netip.MustParseAddr(tc.addr).Unmap().String()
			if got := owners.wasAsked(unmapped); got != tc.lookup {
				t.Errorf("looked up: %v, want %v", got, tc.lookup)
			}
		})
	}
}

func TestClusterRuleYieldsToTheAllowList(t *testing.T) {
	allow, _ := egress.ParseCIDRs("10.96.0.10/32")
	owners := tenants()
	p := egress.New(allow).WithCluster(clusterRanges, owners)
	if err := p.Check(context.Background(), "a", netip.MustParseAddr("10.96.0.10")); err != nil {
		t.Fatalf("an allowed address was refused: %v", err)
	}
	if err := p.Check(context.Background(), "a", netip.MustParseAddr("10.244.0.6")); err == nil {
		t.Fatal("an address the allow list does not name was allowed")
	}
	if owners.wasAsked("10.96.0.10") {
		t.Error("an allowed address was looked up")
	}
}

// TestClusterRuleRefusesBeforeConnecting: the rule runs in the dial's
// Control hook, so a refused address is never connected to; the dial hook
// would fail the test (and not dial) if it let one through.
func TestClusterRuleRefusesBeforeConnecting(t *testing.T) {
	p := egress.Default().WithCluster(clusterRanges, tenants()).WithDialHook(loopbackOnly(t))
	for _, addr := range []string{"10.244.0.6:8080", "10.96.0.10:80", "[fd00:10::6]:80", "10.244.0.8:80"} {
		guard := p.Guard("a")
		_, err := dialer(guard).DialContext(context.Background(), "tcp", addr)
		var r *egress.RefusedError
		if !errors.As(err, &r) || r.Class != egress.ClassCluster || r.Address != addr {
			t.Errorf("dial %s: %v, want the in-cluster rule's refusal", addr, err)
		}
		if guard.Refused() != r {
			t.Errorf("dial %s: the refusal was not recorded", addr)
		}
	}
}

// proxyRecorder is a loopback HTTP proxy that forwards nothing: it records
// what it was asked for and answers itself.
type proxyRecorder struct {
	mu    sync.Mutex
	asked []string // "CONNECT host:port" or "POST http://host/path"
}

func (p *proxyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	target := r.URL.String()
	if r.Method == http.MethodConnect {
		target = r.Host
	}
	p.asked = append(p.asked, r.Method+" "+target)
	p.mu.Unlock()
	http.Error(w, "test proxy: not forwarding", http.StatusForbidden)
}

func (p *proxyRecorder) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// TestClusterRuleHoldsThroughAProxy: with a proxy configured the manager
// dials only the proxy, so the target is checked before the forwarded
// request or the CONNECT; a target of another namespace never reaches the
// proxy, one of the McpServer's own namespace does.
func TestClusterRuleHoldsThroughAProxy(t *testing.T) {
	rec := &proxyRecorder{}
	proxy := httptest.NewServer(rec)
	t.Cleanup(proxy.Close)
	proxyURL, _ := url.Parse(proxy.URL)
	allow, _ := egress.ParseCIDRs("127.0.0.1/32") // the proxy itself
	p := egress.New(allow).WithCluster(clusterRanges, tenants()).WithDialHook(loopbackOnly(t))

	cases := []struct {
		target  string
		refused string // the refused address, or "" when the proxy is asked
		asked   string
	}{
		{"http://10.96.0.10/mcp", "10.96.0.10:80", ""},
		{"https://10.244.0.6:8443/mcp", "10.244.0.6:8443", ""},
		{"http://[fd00:10::6]:3000/mcp", "[fd00:10::6]:3000", ""},
		{"http://10.96.0.20/mcp", "", "POST http://10.96.0.20/mcp"},
		{"https://10.244.0.5:8443/mcp", "", "CONNECT 10.244.0.5:8443"},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			guard := p.Guard("a")
			tr := &http.Transport{
				Proxy:       guard.Proxy(http.ProxyURL(proxyURL)),
				DialContext: (&net.Dialer{ControlContext: guard.Control}).DialContext,
			}
			defer tr.CloseIdleConnections()
			before := len(rec.requests())
			req, _ := http.NewRequest(http.MethodPost, tc.target, strings.NewReader("{}"))
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			got := rec.requests()[before:]
			if tc.refused != "" {
				var r *egress.RefusedError
				if !errors.As(err, &r) || r.Address != tc.refused || r.Class != egress.ClassCluster {
					t.Fatalf("err = %v, want the in-cluster refusal of %s", err, tc.refused)
				}
				if len(got) != 0 {
					t.Fatalf("the proxy was asked %v for a refused target", got)
				}
				return
			}
			if len(got) != 1 || got[0] != tc.asked {
				t.Fatalf("the proxy was asked %v (err %v), want %q", got, err, tc.asked)
			}
		})
	}
}
