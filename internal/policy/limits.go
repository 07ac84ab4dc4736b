package policy

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// The floors and ceilings the manager's flags carry by default (docs/design.md, "Budgets" and "Limits").
// See docs/design.md, "Limits".
const (
	DefaultMinReconnectDelay      = 100 * time.Millisecond
	DefaultMinHealthCheckInterval = time.Second
	DefaultMaxToolCallTimeout     = 10 * time.Minute
	DefaultMaxConnectionTimeout   = 10 * time.Minute
)

// The manager's flags that set Limits, named in the errors a spec gets.
const (
	FlagMinReconnectDelay      = "--min-reconnect-delay"
	FlagMinHealthCheckInterval = "--min-health-check-interval"
	FlagMaxToolCallTimeout     = "--max-tool-call-timeout"
	FlagMaxConnectionTimeout   = "--max-connection-timeout"
)

// Limits are the administrator's floors and ceilings on a spec's timings,
// so that no tenant makes the manager reconnect or probe in a busy loop or
// hold a call for weeks. A zero field sets no bound: the zero value accepts
// what the CRD accepts (tests rely on short delays); the manager's flags
// carry the Default* values.
type Limits struct {
	// MinReconnectDelay is the least spec.reconnect.initialDelayMs (and so
	// maxDelayMs, which is at least as long).
	MinReconnectDelay time.Duration
	// MinHealthCheckInterval is the least non-zero
	// spec.healthCheckIntervalMs; 0 (no health check) stays allowed.
	MinHealthCheckInterval time.Duration
	// MaxToolCallTimeout is the most spec.toolCallTimeoutMs.
	MaxToolCallTimeout time.Duration
	// MaxConnectionTimeout is the most spec.connectionTimeoutMs.
	MaxConnectionTimeout time.Duration
}

// DefaultLimits are the flags' defaults.
func DefaultLimits() Limits {
	return Limits{
		MinReconnectDelay:      DefaultMinReconnectDelay,
		MinHealthCheckInterval: DefaultMinHealthCheckInterval,
		MaxToolCallTimeout:     DefaultMaxToolCallTimeout,
		MaxConnectionTimeout:   DefaultMaxConnectionTimeout,
	}
}

// bound is one limit on one duration field of the spec.
type bound struct {
	path  *field.Path
	set   bool // the spec sets the field; an unset one takes the default, clamped
	value *time.Duration
	limit time.Duration
	flag  string
	floor bool // a floor, else a ceiling
	// zeroOK: 0 is allowed below a floor (it disables the feature).
	zeroOK bool
}

// check refuses a set value beyond the bound and clamps an unset default
// into it, so that an administrator's stricter flag never makes a spec that
// sets nothing invalid.
func (r *resolver) check(b bound) {
	v := *b.value
	if v < 0 {
		return // refused by the CRD's range already
	}
	beyond := b.limit > 0 && ((b.floor && v < b.limit && !(b.zeroOK && v == 0)) || (!b.floor && v > b.limit))
	if !beyond {
		return
	}
	if !b.set {
		*b.value = b.limit
		return
	}
	rel := "at least"
	if !b.floor {
		rel = "at most"
	}
	r.errs = append(r.errs, field.Invalid(b.path, v.Milliseconds(),
		"must be "+rel+" "+itoa(b.limit.Milliseconds())+" on this cluster ("+b.flag+"="+b.limit.String()+")"))
}

// limits applies the administrator's Limits to the resolved timings.
func (r *resolver) limits(root *field.Path, spec *v1alpha1.McpServerSpec, p *Policy) {
	l := r.rt.Limits
	rc := spec.Reconnect
	if rc == nil {
		rc = &v1alpha1.ReconnectPolicy{}
	}
	for _, b := range []bound{
		{path: root.Child("toolCallTimeoutMs"), set: spec.ToolCallTimeoutMs != nil, value: &p.ToolCallTimeout,
			limit: l.MaxToolCallTimeout, flag: FlagMaxToolCallTimeout},
		{path: root.Child("connectionTimeoutMs"), set: spec.ConnectionTimeoutMs != nil, value: &p.ConnectionTimeout,
			limit: l.MaxConnectionTimeout, flag: FlagMaxConnectionTimeout},
		{path: root.Child("healthCheckIntervalMs"), set: spec.HealthCheckIntervalMs != nil, value: &p.HealthCheckInterval,
			limit: l.MinHealthCheckInterval, flag: FlagMinHealthCheckInterval, floor: true, zeroOK: true},
		{path: root.Child("reconnect", "initialDelayMs"), set: rc.InitialDelayMs != nil, value: &p.Reconnect.InitialDelay,
			limit: l.MinReconnectDelay, flag: FlagMinReconnectDelay, floor: true},
		{path: root.Child("reconnect", "maxDelayMs"), set: rc.MaxDelayMs != nil, value: &p.Reconnect.MaxDelay,
			limit: l.MinReconnectDelay, flag: FlagMinReconnectDelay, floor: true},
	} {
		r.check(b)
	}
}
