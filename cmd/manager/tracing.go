package main

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/internal/tracing"
)

// tracingFlushTimeout bounds the flush of the last spans at shutdown, within
// the manager's 30 s.
const tracingFlushTimeout = 5 * time.Second

// setupTracing builds the tracer provider from the OTEL_* environment into
// opts and returns what flushes it when the manager stops. With tracing off
// both are no-ops. See docs/design.md, "Tracing".
func setupTracing(opts *options) (flush func(), err error) {
	log := ctrl.Log.WithName("tracing")
	tp, shutdown, err := tracing.Setup(context.Background(), log)
	if err != nil {
		return nil, err
	}
	opts.tracerProvider = tp
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Error(err, "the last spans were not exported")
		}
	}, nil
}
