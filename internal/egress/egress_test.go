package egress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/egress"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		addr, class string
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.1.2", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"::ffff:169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"239.1.2.3", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"::ffff:224.0.0.251", "multicast"},
		// Private and public ranges are not refused.
		{"10.1.2.3", ""},
		{"172.16.0.1", ""},
		{"192.168.1.1", ""},
		{"100.64.0.1", ""},
		{"8.8.8.8", ""},
		{"100.100.100.200", "metadata"},
		{"::ffff:100.100.100.200", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"64:ff9b::7f00:1", "NAT64"},
		{"64:ff9b::a9fe:a9fe", "NAT64"},
		// Next to them, not refused.
		{"100.100.100.201", ""},
		{"fd00:ec2::253", ""},
		{"64:ff9b:1::1", ""},
		{"2001:db8::1", ""},
		{"::ffff:10.0.0.1", ""},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			if got := egress.Classify(netip.MustParseAddr(tc.addr)); got != tc.class {
				t.Errorf("Classify(%s) = %q, want %q", tc.addr, got, tc.class)
			}
		})
	}
}

func TestCheckWithAllowList(t *testing.T) {
	allow, err := egress.ParseCIDRs(" 127.0.0.0/8, ::1/128,,::ffff:169.254.0.0/112 ")
	if err != nil {
		t.Fatal(err)
	}
	p := egress.New(allow)
	cases := []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"127.9.9.9", true},
		{"::ffff:127.0.0.1", true}, // mapped, checked as 127.0.0.1
		{"::1", true},
		{"169.254.3.4", true}, // the mapped prefix covers 169.254.0.0/16
		{"169.254.169.254", true},
		{"fe80::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"10.0.0.1", true},
	}
	for _, tc := range cases {
		err := p.Check(context.Background(), "ns", netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.allowed {
			t.Errorf("Check(%s) = %v, want allowed=%v", tc.addr, err, tc.allowed)
		}
	}
	if err := egress.Default().Check(context.Background(), "ns", netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Error("the default policy allowed loopback")
	}
}

func TestParseCIDRsNamesTheBadEntry(t *testing.T) {
	_, err := egress.ParseCIDRs("127.0.0.0/8,127.0.0.1,10.0.0.0/8")
	if err == nil || !strings.Contains(err.Error(), `"127.0.0.1"`) {
		t.Fatalf("err = %v, want one naming 127.0.0.1", err)
	}
	got, err := egress.ParseCIDRs("")
	if err != nil || len(got) != 0 {
		t.Fatalf("empty list: %v, %v", got, err)
	}
}

// loopbackOnly is the dial hook of every test here: an address the policy
// let through that is not loopback fails the test and is not dialled, so a
// broken policy never sends a packet off this machine.
func loopbackOnly(t *testing.T) func(network, address string) error {
	return func(network, address string) error {
		ap, err := netip.ParseAddrPort(address)
		if err == nil && ap.Addr().Unmap().IsLoopback() {
			return nil
		}
		t.Errorf("the policy let %s %s through to the dialer", network, address)
		return errors.New("test: never dial a non-loopback address")
	}
}

func dialer(g *egress.Guard) *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, ControlContext: g.Control}
}

func listen(t *testing.T, network, addr string) string {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func TestControlRefusesBeforeConnecting(t *testing.T) {
	port := listen(t, "tcp4", "127.0.0.1:0")
	port6 := listen(t, "tcp6", "[::1]:0")
	ctx := context.Background()

	cases := []struct {
		name, network, addr, refused, class string
	}{
		{"metadata", "tcp", "169.254.169.254:80", "169.254.169.254:80", "link-local"},
		{"link-local IPv6", "tcp", "[fe80::1%lo]:80", "[fe80::1%lo]:80", "link-local"},
		{"multicast", "tcp", "224.0.0.1:80", "224.0.0.1:80", "multicast"},
		{"name of loopback", "tcp4", "localhost:" + port, "127.0.0.1:" + port, "loopback"},
		{"IPv6 loopback", "tcp", "[::1]:" + port6, "[::1]:" + port6, "loopback"},
		{"IPv4-mapped loopback", "tcp", "[::ffff:127.0.0.1]:" + port, "127.0.0.1:" + port, "loopback"},
		{"unspecified", "tcp4", "0.0.0.0:" + port, "0.0.0.0:" + port, "unspecified"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			guard := egress.Default().WithDialHook(loopbackOnly(t)).Guard("ns")
			_, err := dialer(guard).DialContext(ctx, tc.network, tc.addr)
			var r *egress.RefusedError
			g.Expect(errors.As(err, &r)).To(BeTrue(), "dial error %v", err)
			g.Expect(r.Address).To(Equal(tc.refused))
			g.Expect(r.Class).To(Equal(tc.class))
			g.Expect(guard.Refused()).To(Equal(r))
			g.Expect(r.Error()).To(Equal("Refused to connect to " + tc.refused + ": " + tc.class +
				" addresses are not allowed for upstreams; an administrator can allow them with --upstream-allow-cidrs"))
		})
	}
}

func TestControlAllowsListedLoopback(t *testing.T) {
	port := listen(t, "tcp4", "127.0.0.1:0")
	port6 := listen(t, "tcp6", "[::1]:0")
	allow, err := egress.ParseCIDRs("127.0.0.0/8,::1/128")
	if err != nil {
		t.Fatal(err)
	}
	p := egress.New(allow).WithDialHook(loopbackOnly(t))
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::ffff:127.0.0.1]:" + port, "[::1]:" + port6} {
		guard := p.Guard("ns")
		c, err := dialer(guard).DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Errorf("dial %s: %v", addr, err)
			continue
		}
		_ = c.Close()
		if guard.Refused() != nil {
			t.Errorf("dial %s: refusal recorded: %v", addr, guard.Refused())
		}
	}
	// Only 127.0.0.0/8: the IPv6 loopback stays refused.
	only4, _ := egress.ParseCIDRs("127.0.0.0/8")
	_, err = dialer(egress.New(only4).WithDialHook(loopbackOnly(t)).Guard("ns")).DialContext(context.Background(), "tcp", "[::1]:"+port6)
	var r *egress.RefusedError
	if !errors.As(err, &r) {
		t.Errorf("dial [::1] with only 127.0.0.0/8 allowed: %v", err)
	}
}

func TestProxyChecksTheUpstreamBehindTheProxy(t *testing.T) {
	proxyURL, _ := url.Parse("http://10.0.0.10:3128")
	viaProxy := func(*http.Request) (*url.URL, error) { return proxyURL, nil }
	direct := func(*http.Request) (*url.URL, error) { return nil, nil }
	cases := []struct {
		name    string
		target  string
		proxy   func(*http.Request) (*url.URL, error)
		refused string
	}{
		{"metadata through the proxy", "http://169.254.169.254/latest/meta-data", viaProxy, "169.254.169.254:80"},
		{"https port", "https://[fe80::1]/mcp", viaProxy, "[fe80::1]:443"},
		{"name of loopback", "http://localhost:8080/mcp", viaProxy, "127.0.0.1:8080"},
		{"private address", "http://10.1.2.3:3000/mcp", viaProxy, ""},
		{"no proxy: left to Control", "http://169.254.169.254/", direct, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			guard := egress.Default().Guard("ns")
			req, _ := http.NewRequest(http.MethodPost, tc.target, nil)
			_, err := guard.Proxy(tc.proxy)(req)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var r *egress.RefusedError
			if !errors.As(err, &r) || r.Address != tc.refused {
				t.Fatalf("err = %v, want a refusal of %s", err, tc.refused)
			}
			if guard.Refused() != r {
				t.Errorf("refusal not recorded")
			}
		})
	}
}
