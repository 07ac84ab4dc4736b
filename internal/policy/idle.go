package policy

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// MinSuspendAfterMs is the shortest spec.idle.suspendAfterMs above 0: a
// server that sleeps sooner would spend more on waking than it saves.
// See docs/design.md, "Idle servers".
const MinSuspendAfterMs = 60000

// suspendAfter resolves spec.idle.suspendAfterMs: 0 (or unset) never
// sleeps; otherwise at least MinSuspendAfterMs, and only for stdio servers,
// whose process is what sleeping saves.
func (r *resolver) suspendAfter(path *field.Path, spec *v1alpha1.McpServerSpec) time.Duration {
	if spec.Idle == nil || spec.Idle.SuspendAfterMs == nil || *spec.Idle.SuspendAfterMs == 0 {
		return 0
	}
	ms := int64(*spec.Idle.SuspendAfterMs)
	switch {
	case spec.Transport != v1alpha1.TransportStdio:
		r.errs = append(r.errs, field.Forbidden(path, "applies only to stdio servers"))
	case ms < MinSuspendAfterMs:
		r.errs = append(r.errs, field.Invalid(path, ms, "must be 0 (never) or at least "+itoa(MinSuspendAfterMs)))
	}
	return time.Duration(ms) * time.Millisecond
}
