package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// reach is what a replica knows of whether it can reach a peer: down
// since when, at which address, and why.
type reach struct {
	down    bool
	since   time.Time
	address string
	why     string
	// failedProbes counts the probes without an answer in a row: one is
	// not enough, as a replica that just joined may not serve yet.
	failedProbes int
}

// probesToDown is how many probes in a row must fail before a probe marks
// a peer unreachable (a failed forward does at once).
const probesToDown = 2

// Probe dials the replica to and completes the mutual TLS handshake, as a
// forward does, and records whether it answered: a peer this replica never
// forwards to is known unreachable too, and so is this replica's own
// advertised address when nothing answers there. See docs/design.md,
// "Forwarding between replicas".
func (c *Client) Probe(ctx context.Context, to Target) error {
	if to.Address == "" {
		err := errors.New("no address advertised")
		c.reached(to, err)
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout+handshakeTimeout)
	defer cancel()
	conn, err := c.dialTLS(dctx, c.dialer, "tcp", to.Address)
	if err == nil {
		_ = conn.Close()
	}
	if ctx.Err() != nil {
		return ctx.Err() // stopping: says nothing of the peer
	}
	if err != nil && !c.probeFailed(to.Name) {
		return err
	}
	c.reached(to, err)
	return err
}

// probeFailed counts a failed probe of name and reports whether it makes
// (or keeps) the peer unreachable.
func (c *Client) probeFailed(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reach[name]
	r.failedProbes++
	c.reach[name] = r
	return r.down || r.failedProbes >= probesToDown
}

// reached records whether a forward or a probe to to got an answer (err
// nil) or not: the gauge and one log line change only when that changes.
func (c *Client) reached(to Target, err error) {
	down := err != nil
	c.mu.Lock()
	was, known := c.reach[to.Name]
	known = known && !was.since.IsZero() // not only failed probes below probesToDown
	now := reach{down: down, since: was.since, address: to.Address, failedProbes: was.failedProbes}
	if !down {
		now.failedProbes = 0
	}
	if !known || was.down != down {
		now.since = time.Now()
	}
	if down {
		// "; " separates the replicas in the Lease's annotation, which the
		// owner reads by name: an error never adds one.
		now.why = strings.ReplaceAll(err.Error(), "; ", ", ")
	}
	c.reach[to.Name] = now
	c.mu.Unlock()
	if known && was.down == down {
		return
	}
	unreachable.WithLabelValues(to.Name).Set(gaugeBool(down))
	switch {
	case down:
		c.log.Error(err, "cannot reach a replica: calls forwarded to it fail until it answers", "peer", to.Name, "address", to.Address)
	case known:
		c.log.Info("reached the replica again", "peer", to.Name, "address", to.Address)
	}
}

// Unreachable says which replicas this one cannot reach now, one
// "name at address since time: error" per replica, sorted by name and
// separated by "; ", or "" when it reaches every one it tried. The
// membership writes it on this replica's Lease.
func (c *Client) Unreachable() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, r := range c.reach {
		if r.down {
			out = append(out, fmt.Sprintf("%s at %s since %s: %s", name, r.address, r.since.UTC().Format(time.RFC3339), r.why))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// Known are the replicas the Client has a record of.
func (c *Client) Known() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.reach {
		out = append(out, name)
	}
	return out
}

// Forget drops what the Client knows of a replica that left: its
// mcpbridge_replica_peer_unreachable series goes away.
func (c *Client) Forget(name string) {
	c.mu.Lock()
	delete(c.reach, name)
	c.mu.Unlock()
	unreachable.DeleteLabelValues(name)
}
