package egress

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// The in-cluster rule: an McpServer's upstream may be a Pod or Service of
// its own namespace, or an address outside the cluster, but not a Pod or
// Service of another namespace, whose tenant admits the manager and not the
// author. See docs/design.md, "Egress policy".

// ClusterFlag is the manager flag that lists the cluster's Pod and Service
// ranges: the addresses whose owner the in-cluster rule looks up.
const ClusterFlag = "--cluster-cidrs"

// ClassCluster is the class of a refusal by the in-cluster rule.
const ClassCluster = "cluster"

// DefaultClusterCIDRs are the ranges looked up without --cluster-cidrs:
// the private and shared ranges Pod and Service networks are taken from
// (RFC 1918, RFC 6598, IPv6 unique local). An address outside them is
// never looked up.
var DefaultClusterCIDRs = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// lookupTimeout bounds one owner look-up, within the dial's own deadline.
const lookupTimeout = 5 * time.Second

// Owner is a Pod or a Service that has an address.
type Owner struct {
	Kind      string // "Pod" or "Service"
	Namespace string
	Name      string
}

// Owners tells which Pods and Services have an address, at the time of
// asking.
type Owners interface {
	Owners(ctx context.Context, a netip.Addr) ([]Owner, error)
}

type clusterRule struct {
	ranges []netip.Prefix
	owners Owners
}

// WithCluster returns a copy of p that also refuses an address in ranges
// that belongs to a Pod or Service of another namespace than the
// McpServer's, as owners tells at dial time. A look-up that fails refuses
// the address: it may be another namespace's.
func (p *Policy) WithCluster(ranges []netip.Prefix, owners Owners) *Policy {
	c := *p
	r := &clusterRule{owners: owners}
	for _, pfx := range ranges {
		r.ranges = append(r.ranges, normalize(pfx))
	}
	c.cluster = r
	return &c
}

// refusal is why a is refused to an upstream of namespace, or "". It does
// not name the owner: the author must not learn another tenant's objects.
func (r *clusterRule) refusal(ctx context.Context, namespace string, a netip.Addr) string {
	if !r.inRanges(a) {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	owners, err := r.owners.Owners(ctx, a)
	if err != nil {
		return fmt.Sprintf("it lies in the cluster's Pod and Service ranges (%s) and whether it belongs to "+
			"another namespace could not be told (%v)", ClusterFlag, err)
	}
	for _, o := range owners {
		if o.Namespace != namespace {
			return "it is the address of a Pod or Service in another namespace than the McpServer's"
		}
	}
	return ""
}

func (r *clusterRule) inRanges(a netip.Addr) bool {
	for _, pfx := range r.ranges {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}
