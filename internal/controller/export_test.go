package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Moved is what the reconciler requeues on a membership event.
func (r *McpServerReconciler) Moved(ctx context.Context) []reconcile.Request {
	return r.moved(ctx, nil)
}

// TrackWrites gives a reconciler built outside a manager the record of its
// status writes that SetupWithManager gives the manager's.
func TrackWrites(r *McpServerReconciler) { r.written = newWrittenVersions() }

// ShareHolders is how many supervisors hold namespace ns's share.
func (s *Supervisors) ShareHolders(ns string) int { return s.shares.Holders(ns) }
