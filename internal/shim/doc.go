// Package shim owns the stdio tunnel between the manager and a stdio
// server running in its own Pod: both ends of it. The server end (Server,
// run by cmd/shim as the entrypoint of the server's container) starts the
// server's command once per tunnel; the client end (Dial, Tunnel) is what
// the manager's supervisor connects an MCP session over. See
// docs/design.md, "The shim and the tunnel" and "stdio children".
//
// # Protocol
//
// One tunnel is one HTTP/1.1 request on its own TCP connection:
//
//	POST /tunnel
//	Authorization: Bearer <token>
//	Transfer-Encoding: chunked       request body  = the child's stdin
//
//	200 OK
//	Trailer: Shim-Exit, Shim-Reason  response body = the child's stdout
//	...
//	Shim-Exit: code=1 | signal=9     after the child and its group are reaped
//	Shim-Reason: exited | stdin-closed | client-gone | pipe-closed | preempted | shutdown
//
// Both bodies stream at once: the server enables full duplex
// (http.ResponseController.EnableFullDuplex) and flushes every read of the
// child's stdout; Go's HTTP/1.1 client returns the response as soon as its
// headers arrive while it is still sending the request body, and flushes
// every chunk of it. The client closing stdin is the request body's end (a
// half-close); the response's end carries the trailers. A response that
// ends cleanly with Shim-Exit is the shim's confirmation that the child and
// every member of its process group it could wait for have been reaped,
// which is what the supervisor's close barrier needs; an end without it (a
// broken connection) means the child may still run (ErrUnconfirmed).
// Refusals come before the 200: 401 for a wrong or missing token, 500 with
// "Shim-Error: start" and the reason when the command cannot be started
// (not found, not executable), 503 while the shim stops. A command that
// starts and exits at once gives a tunnel that ends at once, with its exit
// status.
//
// Why full-duplex HTTP/1.1 rather than h2c or a WebSocket: it is the
// standard library on both sides (the shim stays a small static binary),
// it needs no framing of our own and no upgrade, trailers carry the exit
// status in-band after the last stdout byte, and a chunk per message costs
// a few bytes and no extra round trip.
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
