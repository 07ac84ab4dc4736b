package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Moved is what the reconciler requeues on a membership event.
func (r *McpServerReconciler) Moved(ctx context.Context) []reconcile.Request {
	return r.moved(ctx, nil)
}
