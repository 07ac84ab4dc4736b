package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// handOver lets go, as soon as a stopping replica has marked itself
// leaving, of the stdio servers it runs that another replica now owns:
// each child is reaped once its calls in flight are answered, then the
// server's McpToolSet released, so that the new owner starts its own at
// once rather than when this replica exits. A Streamable HTTP server needs
// nothing here: its new owner connects and publishes first (make before
// break), and this replica disposes its own connection at exit. With no
// other replica to take a server, it stays until exit, serving the calls
// that still come. See docs/design.md, "Replicas and ownership": shutdown.
type handOver struct{ r *McpServerReconciler }

// leaveWait bounds the wait for the Lease to be marked leaving.
const leaveWait = 5 * time.Second

// NeedLeaderElection is false: every replica hands its own servers over.
func (handOver) NeedLeaderElection() bool { return false }

func (h handOver) Start(ctx context.Context) error {
	<-ctx.Done()
	select {
	case <-h.r.Leaving:
	case <-time.After(leaveWait):
		return nil
	}
	// The manager's context has ended; the caches still run until this
	// returns, and the supervisors until they are disposed.
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, key := range h.r.Supervisors.Keys() {
		wg.Go(func() { h.one(ctx, key) })
	}
	wg.Wait()
	return nil
}

func (h handOver) one(ctx context.Context, key types.NamespacedName) {
	log := ctrl.LoggerFrom(ctx).WithValues("mcpserver", key.String())
	obj := &v1alpha1.McpServer{}
	if err := h.r.Client.Get(ctx, key, obj); err != nil || obj.Spec.Transport != v1alpha1.TransportStdio {
		return
	}
	if owner := h.r.ownerOf(obj); owner == "" || owner == h.r.Replica {
		return
	}
	if err := h.r.letGo(ctrl.LoggerInto(ctx, log), obj); err != nil {
		log.Error(err, "cannot hand the server over before exit; its new owner starts it once this replica has left")
	}
}
