// Package membership owns the replicas' membership and the ownership of
// McpServers among them. Each replica keeps one coordination.k8s.io Lease
// in the manager's namespace (Membership.Start, a manager.Runnable that
// runs on every replica, leader or not), watches its peers' Leases and
// judges them live by its own clock, from when it last saw each one
// renewed, so that a peer's clock skew neither drops it nor keeps it
// forever. Itself it judges by its accepted renewals too, so that a
// replica cut off from the apiserver counts itself out before any peer
// can (fencing), and MayHold tells a peer when such a replica has had the
// time to reap its children. Owner maps an McpServer's UID to one live
// replica by rendezvous hashing, so that a replica joining or leaving
// moves only its own share. It talks to the apiserver only about Leases
// and knows nothing of McpServers. See docs/design.md, "Replicas and
// ownership".
package membership
