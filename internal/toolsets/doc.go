// Package toolsets carries every McpServer's published tools to every
// replica of the manager, through the Kubernetes API: one McpToolSet per
// McpServer, written by the replica that holds the server's connection (its
// holder), read by all of them.
//
// codec.go encodes a server's tools for the object (a gzip of their JSON,
// within MaxCompressedBytes) and decodes them again. mirror.go is the
// Mirror, a controller that runs on every replica, leader or not: it keeps
// a registry (the one the gateway serves) equal to the McpToolSets, and
// reports ready once every McpToolSet it has seen is in it. route.go is
// the registry.Caller each mirrored set is published with: a call goes to
// this replica's own supervisor when it holds the server, is forwarded to
// the holder otherwise, and waits, up to the server's connectionTimeoutMs,
// while the server has no live holder (handed over, or its holder gone).
//
// The package knows nothing of supervisors, Leases or the transport
// between replicas: the manager passes them in as functions (Mirror's
// Local, Peer and Forward). See docs/design.md, "Replicas and ownership".
package toolsets
