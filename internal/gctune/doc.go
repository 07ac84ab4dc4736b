// Package gctune owns how the manager's process tunes the Go garbage
// collector while it runs.
//
// A replica spends most of its life quiet: its servers connected, agents
// calling now and then. GOGC=100 still lets its heap grow to twice what is
// live (with its stacks) before a collection, and the runtime keeps those
// pages, so at rest a replica holds about as much garbage as live memory.
// Quiet sizes the collector's headroom to what the process allocates
// instead: a GOGC whose headroom holds what it allocated in the last
// --gc-quiet-headroom, never more than --gc-busy-percent and never less
// than 10%. A collection then comes about once per that interval while the
// manager is quiet, and at --gc-busy-percent when it is busy (servers
// connecting, agents calling): 40 by default, below the runtime's 100, so
// that a ramp's heap, which sets a replica's peak RSS, grows by 40% of what
// is live between collections rather than by all of it, for more CPU spent
// collecting; but by at least minBusyHeadroom. Once a burst is over, the
// pages it took are returned to the OS at once.
//
// The manager runs it, and so does hack/bench/isolation, whose peak RSS is
// then the manager's. See docs/design.md, "Replicas and ownership"
// (memory).
package gctune
