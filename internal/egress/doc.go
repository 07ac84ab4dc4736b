// Package egress owns the manager's egress policy for Streamable HTTP
// upstreams: which addresses a connection supervisor may connect to. A
// tenant who may create an McpServer chooses its URL, so without a policy
// the manager would connect wherever its network position reaches: its own
// loopback ports, the cloud metadata service, link-local neighbours.
//
// A Policy refuses loopback, link-local (169.254.169.254 included),
// unspecified and multicast addresses, IPv4 and IPv6 alike (an IPv4-mapped
// IPv6 address counts as the IPv4 address it maps), except those an
// administrator lists in --upstream-allow-cidrs. Every other address,
// private ranges included, is allowed.
//
// The check runs on the address actually dialled: a Guard's Control is a
// net.Dialer Control hook, called after the name was resolved and the
// socket created, before it connects. So a host name that resolves to a
// refused address is refused too, every address Happy Eyeballs tries is
// checked, and nothing leaves the machine for a refused address. When the
// manager reaches upstreams through an HTTP proxy, the manager dials only
// the proxy; Guard.Proxy then checks the upstream's own address as far as
// the manager can resolve it.
//
// See docs/design.md, "Egress policy".
package egress
