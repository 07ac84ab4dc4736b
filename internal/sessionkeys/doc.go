// Package sessionkeys owns the key ring the gateway seals 2025-11-25 agent
// session ids with, so that every manager replica honours a session opened
// on any other: AES-256 keys kept in a Secret of the manager's namespace
// that the operator creates and rotates.
//
// ring.go is the Ring, a controller-runtime Runnable on every replica: it
// reads the Secret (creating it when absent; several replicas may start at
// once, so a create that loses the race reads the winner's ring, as
// internal/certs does for its CA), reads it again every Refresh, adds a new
// key every RotateEvery that becomes current only once every replica has
// read it, drops a key HonourFor after its successor became current, and
// makes a new ring when the Secret is deleted. secret.go is the Secret's
// format. The gateway uses the Ring through gateway.SessionKeys; no key
// ever reaches a log, an event, a status or a metric.
//
// See docs/design.md, "Sessions on every replica".
package sessionkeys
