// Package shim owns the server end of the stdio tunnel between the manager
// and a stdio server running in its own Pod: Server, run by cmd/shim as the
// entrypoint of the server's container, starts the server's command once
// per tunnel. The client end, which the manager's supervisor connects an
// MCP session over, and the wire protocol both ends speak are
// internal/shim/tunnel's, so that the manager never compiles the server.
// See docs/design.md, "The shim and the tunnel" and "stdio children".
//
// # Semantics
//
//   - One child per tunnel, started fresh and directly (no shell) in its own
//     process group, with the shim's environment (the Pod's env) unchanged;
//     the token comes from a file and is never in any environment. Its
//     stderr is the shim's stderr, the same file: the container log.
//   - The child exiting ends the tunnel, after its group has been killed and
//     reaped. So does the child closing its stdin or stdout and not exiting
//     within the grace.
//   - The tunnel ending by the client's side (stdin closed, or the
//     connection gone) closes the child's stdin at once, then SIGTERMs its
//     group after the grace and SIGKILLs it after another, as the manager
//     does for a Local stdio child: a client that vanished gets no faster
//     end than one that said goodbye, and the child sees the same sequence
//     in both runtimes. A stopped (SIGSTOP) child is SIGKILLed at once.
//   - One child at a time. A new tunnel pre-empts a live one: it ends the
//     old child as above (reason "preempted") and starts its own only after
//     that child has been reaped. Waiting instead would let a half-open
//     tunnel of a manager that died without a FIN hold the slot until TCP
//     keep-alive gave up, minutes later; the supervisor itself never opens
//     a tunnel before it has seen the previous one end, so pre-emption only
//     ever removes a tunnel that nobody is using.
//   - SIGTERM to the shim (the Pod is deleted): new tunnels get 503, /readyz
//     fails, the live child gets stdin EOF and SIGTERM at once and SIGKILL
//     after the grace, its tunnel is confirmed, and the shim exits.
//   - The shim is PID 1 of its container and a child subreaper: it reaps
//     every orphan (see reaper) without taking the exit status of the
//     tunnel's own child from its waiter.
package shim
