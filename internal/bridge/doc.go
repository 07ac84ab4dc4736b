// Package bridge owns the live side of the operator: one connection
// supervisor per MCP server, which publishes the server's tools into the
// per-namespace registry (internal/registry) as their Caller.
//
// It never talks to the Kubernetes apiserver: the controller drives a
// Supervisor with a resolved policy and turns its change signal, snapshots
// and events into status and Kubernetes events.
//
// # Usage
//
// New builds a Supervisor from a policy.Policy; Start runs it until Dispose
// or the end of its context. Changes signals (coalesced, never blocking)
// that Snapshot or DrainEvents have something new. CallTool and
// CallToolJSON forward a tools/call to the live generation; the registry
// hands out the Supervisor as the Caller (a registry.JSONCaller) of each
// published tool.
//
// # States
//
// The snapshot's Phase and Reason are api/v1alpha1's, which the controller
// writes into status as they are; they move only in machine.go:
//
//	Pending ──Start──▶ Connecting ──connected──▶ Ready
//	Connecting ──attempt failed──▶ Connecting (retry scheduled, Attempt n)
//	Ready ──lost──▶ Reconnecting ──connected──▶ Ready
//	Reconnecting ──attempt failed──▶ Reconnecting (retry scheduled)
//	Ready ──suspendAfterMs without a call, generation closed──▶ Idle
//	Idle ──a call requests the wake──▶ Connecting ──connected──▶ Ready
//	Connecting (a wake) ──attempt failed──▶ Reconnecting (retry scheduled)
//	Ready ──lost, reconnect disabled──▶ Failed (ReconnectDisabled)
//	any ──budget spent / failOnStartupError / reconnect disabled /
//	       close barrier passed──▶ Failed (Reason says which)
//
// With reconnect disabled, a lost connection is Failed/ReconnectDisabled
// at once, while its generation still closes, with its tools still
// published; should that close pass the barrier, the reason turns
// CloseTimeout. A failed attempt goes to Failed at once.
//
// Failed is final for the Supervisor; the controller builds a new one on a
// hot swap. Dispose moves no phase: a disposed supervisor's snapshot keeps
// the phase it had, and its tools leave the registry. A retry scheduled while the server has never been Ready keeps
// the phase Connecting, as the first attempt had it.
//
// # Sleeping and waking
//
// With spec.idle.suspendAfterMs (idle.go), serve also runs an idle timer on
// the injected clock. When the live generation has had no call for that
// long and none is in flight, suspendIfIdle takes it out of service in one
// step with the check (calls from then on find a wakeup and wait for it),
// serve closes it through the close barrier, and sleep turns the phase Idle:
// the tools stay in the registry, nothing runs, no health check. The first
// call that finds the server asleep requests the wake (acquire, the one
// function every call goes through); run then starts the next attempt at
// once, in phase Connecting, and wakeAnswered releases the waiting calls
// with the live generation or with why the wake failed. A failed wake is a
// failed attempt of a new outage, like any other. Sleeping tells the
// controller to keep a Pod-runtime server's Deployment at 0 replicas.
//
// # Waiting for the server's Pod
//
// A Pod-runtime server (pod.go) can be absent for reasons that are not a
// failed attempt: its Pod is being created, pulls its image, cannot be
// scheduled. A dialer that implements awaiter is asked, at the start of
// each generation and before the connection budget starts (awaitServer in
// machine.go), to wait until its server can be dialled. Meanwhile the phase
// stays what the generation began with (Connecting or Reconnecting), the
// attempt is not counted, and every new reason to wait is written into the
// snapshot as LastError at StagePod, with the Pod's name (waiting). The wait
// has a connectionTimeoutMs bound of its own; when that passes, the attempt
// fails like any other (errPodDeadline) and counts. A connection clears a
// reason to wait from LastError.
//
// # One run goroutine
//
// Supervisor.run is the supervisor's only long-lived goroutine. Per
// generation it calls attempt, which calls connect through tracedConnect
// (beginGeneration, open: dial the link and start the MCP session; then the
// first tool sync, all under one connectionTimeoutMs context), then
// connected (the generation becomes live and its background goroutines
// start), then, through served, serve (wait for a loss, the stability
// window or the end), then closeGeneration (close the link and session,
// wait for the close signal up to the close barrier). attempt reports
// whether the generation became live and whether its end is final; run
// then asks the outage (outage.go) whether the attempt budget allows
// another attempt and with which delay.
//
// # Who raises a loss
//
// A loss is raised only through generation.lose, once per generation, and
// serve is the only receiver. The goroutines that raise one:
//
//   - waitSession (loss.go): the MCP session ended by itself (sess.Wait
//     returned); beside an exitReporter link (a stdio child, local or in
//     its Pod) watch raises that instead, or the server process's exit.
//     It runs from the connect on, except for a Streamable HTTP session
//     with a GET stream: there it starts once the SDK ends the stream's
//     context, which it does when the session ends (sessionEnd).
//   - the Pod runtime's link (pod.go, through the dialer's onLost): the
//     tunnel's Pod was deleted, replaced or is no longer Ready.
//   - the HTTP transport's round trips (http.go, through the dialer's onLost):
//     a 404 to a request that carried the session id.
//   - a caller of CallTool or CallToolJSON (call.go): the call failed with an
//     error that proves the session gone (EOF, ErrSessionMissing,
//     ErrConnectionClosed).
//   - probes (health.go): two periodic probes failed in a row, or one
//     probe requested by a call that saw a transport failure.
//   - resyncLoop (toolsync.go): a list_changed re-sync ran out of its
//     connectionTimeoutMs budget. It is the generation's syncer, which
//     runs only while a re-sync or a retried publish is pending
//     (generation.wake), so that an idle connection keeps no goroutine
//     for it; a re-sync that failed otherwise is asked for again by a
//     timer (generation.resyncAfter), stopped when the generation closes.
//
// A loss raised while the supervisor itself closes the generation is
// ignored: nothing was lost.
//
// # Closing and disposal
//
// A generation is closed by closeGeneration, which waits for its down signal
// (session ended, link closed, its goroutines returned) at most the close
// barrier, on real time. When the barrier passes while the supervisor runs,
// it stops with Failed/CloseTimeout rather than start a second server
// process. Dispose cancels run and waits at most the barrier too; when the
// last generation has not closed by then it returns an error wrapping
// ErrCloseTimeout. run itself ends only once that generation is down, and
// then closes Closed: the controller keeps a disposed supervisor registered
// until Closed, so that a replacement never overlaps a live server.
//
// # The stability window
//
// A connection that stays up for reconnect.maxDelayMs ends its outage.
// serve starts the window's timer when a generation becomes live and tells
// the outage how long the connection has been up when the timer fires and
// when the connection is lost (outage.upFor); the outage alone decides.
//
// # Files
//
//   - supervisor.go: the Supervisor type, Options, Start, Dispose, snapshots.
//   - machine.go: the state machine (run → attempt → connect → connected →
//     served → serve → closeGeneration).
//   - generation.go: one generation's state, lose and shutdown.
//   - outage.go: the attempt budget, backoff delays and the stability window.
//   - idle.go: calls in flight, the idle timer and the wake of a sleeping
//     server.
//   - loss.go, health.go: detecting a lost connection.
//   - toolsync.go, tasks.go: fetching, publishing and re-syncing tools.
//   - call.go: tool calls through the SDK; rawcall.go and rawcall_response.go:
//     tool calls posted over HTTP by ourselves and the reader of their answer;
//     resultbytes.go: counting what that reader holds against a caller's
//     budget; jsonspan.go: finding the result in the answer without a copy.
//   - pacing.go: the pace at which what a server streams is read (the
//     lines and bytes of SSE streams, a stdio server's output); shares.go:
//     what the servers of a namespace share (Shares), that pace and the
//     budget of the bytes being read from them.
//   - transport.go: the dialer and link a transport implements, and the
//     awaiter of a server that may not be there yet; stdio.go (a child
//     process), pod.go (a tunnel to the shim in the server's Pod) and
//     http.go are the three transports.
//   - protocol.go: the client's identity.
//   - spans.go: the connect, sync and call spans (tracedConnect).
//   - snapshot.go, events.go, observer.go, errors.go: what the supervisor
//     reports; serverlog.go: its log lines, each naming the server.
//
// # Considerations
//
//   - One goroutine moves the phase, so transitions need no coordination
//     beyond the snapshot's mutex; every other goroutine only raises a loss,
//     re-syncs, or reads the live generation.
//   - The close barrier runs on real time, not the injected clock: it guards
//     real processes; so do the deadlines of requests. Backoff, the stability
//     window and the health-check interval use the clock.
//   - Syncs of one server are serialized (syncMu), so a re-sync and a retried
//     publish never interleave.
//
// The contract this implements is in docs/design.md, "The connection
// supervisor".
package bridge
