package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
)

// AllowFlag is the manager flag that lists the CIDRs a Policy allows
// despite their class; refusals name it, so that a user knows whom to ask.
const AllowFlag = "--upstream-allow-cidrs"

// Policy decides which addresses an upstream connection may reach. It is
// immutable and safe for concurrent use.
type Policy struct {
	allow   []netip.Prefix
	hook    func(network, address string) error
	cluster *clusterRule // nil: no in-cluster rule
}

// New returns a policy that refuses loopback, link-local, unspecified,
// multicast, metadata and NAT64 addresses except those in allow.
func New(allow []netip.Prefix) *Policy {
	p := &Policy{}
	for _, pfx := range allow {
		p.allow = append(p.allow, normalize(pfx))
	}
	return p
}

// Default refuses every address of a refused class: the manager's policy
// without --upstream-allow-cidrs.
func Default() *Policy { return New(nil) }

// WithDialHook returns a copy of p that calls hook with every address p
// allows, just before the connection is made; an error from hook refuses
// the connection. Tests use it to prove that nothing but loopback is ever
// dialled, even when the policy is broken.
func (p *Policy) WithDialHook(hook func(network, address string) error) *Policy {
	c := *p
	c.hook = hook
	return &c
}

// ParseCIDRs parses the comma-separated CIDRs of --upstream-allow-cidrs.
// Empty entries are ignored; an entry that is not a CIDR is an error that
// names it.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 127.0.0.0/8 or ::1/128", part)
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}

// normalize turns an IPv4-mapped IPv6 prefix (::ffff:127.0.0.0/104) into
// the IPv4 prefix it covers, because addresses are checked unmapped.
func normalize(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

// RefusedError is a destination the policy refused.
type RefusedError struct {
	// Address is the refused address with its port, as it was dialled.
	Address string
	// Class is why: "loopback", "link-local", "unspecified", "multicast",
	// "metadata", "NAT64", or ClassCluster.
	Class string
	// Reason says, for ClassCluster, whose address it is (or why that
	// could not be told).
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Class == ClassCluster {
		return fmt.Sprintf("Refused to connect to %s: %s; an administrator can allow it with %s",
			e.Address, e.Reason, AllowFlag)
	}
	return fmt.Sprintf("Refused to connect to %s: %s addresses are not allowed for upstreams; "+
		"an administrator can allow them with %s", e.Address, e.Class, AllowFlag)
}

// Addresses refused by class although no property of netip.Addr names
// them: the metadata services some clouds serve outside link-local
// (Alibaba's 100.100.100.200, AWS's IPv6 fd00:ec2::254), and the
// well-known NAT64 prefix, through which an IPv6 address reaches any IPv4
// address, 127.0.0.1 and 169.254.169.254 included.
var (
	metadataAddrs = []netip.Addr{netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("fd00:ec2::254")}
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96")
)

// Classify names the refused class an address belongs to, or "" when it
// belongs to none. An IPv4-mapped IPv6 address is classified as the IPv4
// address it maps.
func Classify(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0: // 0.0.0.0/8: "this network", which Linux dials as the local host
		return "unspecified"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case slices.Contains(metadataAddrs, a):
		return "metadata"
	case nat64Prefix.Contains(a):
		return "NAT64"
	}
	return ""
}

// Check is the policy's verdict on one address for an upstream of an
// McpServer in namespace: nil, or a *RefusedError. Only the in-cluster
// rule uses ctx and namespace.
func (p *Policy) Check(ctx context.Context, namespace string, a netip.Addr) error {
	return p.check(ctx, namespace, a, a.WithZone("").Unmap().String())
}

// check is Check with addr, the address as dialled (with its port), named
// in the refusal. An address --upstream-allow-cidrs lists is allowed
// whatever else holds; otherwise the class rule, then the in-cluster rule.
func (p *Policy) check(ctx context.Context, namespace string, a netip.Addr, addr string) error {
	a = a.WithZone("").Unmap()
	if p.allowed(a) {
		return nil
	}
	if class := Classify(a); class != "" {
		return &RefusedError{Address: addr, Class: class}
	}
	if p.cluster == nil {
		return nil
	}
	if reason := p.cluster.refusal(ctx, namespace, a); reason != "" {
		return &RefusedError{Address: addr, Class: ClassCluster, Reason: reason}
	}
	return nil
}

func (p *Policy) allowed(a netip.Addr) bool {
	for _, pfx := range p.allow {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// Guard applies a Policy to the connections of one HTTP client and
// remembers the first destination it refused, so that the client's owner
// can report the refusal instead of the transport error that wraps it.
type Guard struct {
	p         *Policy
	namespace string
	refused   atomic.Pointer[RefusedError]
}

// Guard returns a new Guard of p for the upstreams of an McpServer in
// namespace (whose own Pods and Services the in-cluster rule allows).
func (p *Policy) Guard(namespace string) *Guard { return &Guard{p: p, namespace: namespace} }

// Refused is the first destination g refused, or nil.
func (g *Guard) Refused() *RefusedError { return g.refused.Load() }

func (g *Guard) refuse(err error) error {
	if r, ok := err.(*RefusedError); ok {
		g.refused.CompareAndSwap(nil, r)
	}
	return err
}

// Control is a net.Dialer ControlContext hook. It runs once per address
// the dialer tries, with the address as it will be connected (after name
// resolution), before the connection is made: a refusal there sends
// nothing. ctx is the dial's; it bounds the in-cluster rule's look-up.
func (g *Guard) Control(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address that cannot be checked is not dialled.
		return fmt.Errorf("refused to connect to %q: not an IP address and port the egress policy can check", address)
	}
	if err := g.p.check(ctx, g.namespace, ap.Addr(), address); err != nil {
		return g.refuse(err)
	}
	if g.p.hook != nil {
		return g.p.hook(network, address)
	}
	return nil
}

// Proxy wraps a proxy function such as http.ProxyFromEnvironment. Through
// a proxy the manager dials only the proxy (whose address Control checks),
// and the proxy dials the upstream; so the upstream's own address is
// checked here, by every rule, before the CONNECT or the forwarded
// request: an IP address as it is, a host name as the manager resolves
// it. A name the manager cannot resolve is left to the proxy, which
// resolves names for clients that cannot.
func (g *Guard) Proxy(proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(req *http.Request) (*url.URL, error) {
		u, err := proxy(req)
		if err != nil || u == nil {
			return u, err
		}
		return u, g.checkHost(req.Context(), req.URL)
	}
}

func (g *Guard) checkHost(ctx context.Context, u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.refuse(g.p.check(ctx, g.namespace, a, net.JoinHostPort(a.Unmap().String(), port)))
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := g.p.check(ctx, g.namespace, a, net.JoinHostPort(a.WithZone("").Unmap().String(), port)); err != nil {
			return g.refuse(err)
		}
	}
	return nil
}
