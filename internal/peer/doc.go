// Package peer owns the replicas' internal endpoint: how a replica that
// does not own an McpServer forwards a tools/call to the replica that does,
// how the agent sessions one replica ends are ended on all, and what
// proves to each end that the other is a replica.
//
//   - replica.go: Config, New and the Replica they build (its certificate,
//     its Endpoint and its Client), and AddToManager.
//   - certificate.go: the replicas' own CA, kept in a Secret of the
//     manager's namespace through internal/certs (not the gateway's CA,
//     whose certificate tenants are given), each replica's certificate for
//     both server and client use, re-issued before it expires, and the TLS
//     configurations of both ends (TLS 1.2 or later, HTTP/2, the
//     replicas' CA as the only trust).
//   - endpoint.go: Endpoint, the HTTPS server (a manager.Runnable on every
//     replica) that requires a client certificate of the replicas' CA and
//     dispatches a call only to the caller its Local lookup returns, never
//     to another forwarder.
//   - client.go: Client, shared by every forwarding caller of a replica,
//     with pooled keep-alive connections, the replica's current client
//     certificate at each handshake and the trace context propagated.
//   - sessionends.go: SessionEnds (a manager.Runnable on every replica),
//     which tells each live peer of the sessions this replica's gateway
//     ended, and a peer that joins later of every end it knows.
//   - wire.go: the call's request and answer, and the ended sessions, on
//     the wire, and the errors
//     (ErrNotServedHere, CallError, ErrUnreachable, ErrNotSent) a forward
//     ends with.
//   - metrics.go: forwards by outcome, the peers this replica cannot
//     reach, and the ended sessions it could not keep.
//
// Authorization, budgets and audit belong to the gateway of the replica the
// agent called: a forwarded call is checked there once, and the owner only
// runs it. See docs/design.md, "Forwarding between replicas".
package peer
