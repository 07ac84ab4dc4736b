// Package tunnel owns the client end of the shim's stdio tunnel (Dial,
// Tunnel) and everything both ends share: the wire protocol (paths,
// headers, trailers, ExitError and the other answers) and the tunnel's TLS
// (NewKeyPair, the pinned client configuration and the server's). The
// server end is internal/shim; the manager imports only this package.
// See docs/design.md, "The shim and the tunnel".
//
// # Files
//
//   - client.go: Dial, Tunnel and how a tunnel's end is read.
//   - protocol.go: the wire constants, EndReason, ExitError and the errors
//     a client sees.
//   - tls.go: the key pair the manager issues and the TLS both ends use.
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
// The server end's semantics (one child per tunnel, pre-emption, the end
// of a child) are in internal/shim's package documentation.
package tunnel
