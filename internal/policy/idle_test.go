package policy_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

func withSuspendAfter(ms int32) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.Idle = &v1alpha1.IdlePolicy{SuspendAfterMs: ptr32(ms)} }
}

func TestResolveSuspendAfter(t *testing.T) {
	const path = "spec.idle.suspendAfterMs"
	for _, tc := range []struct {
		name    string
		spec    *v1alpha1.McpServerSpec
		want    time.Duration
		errType field.ErrorType // empty: valid
	}{
		{name: "unset never sleeps", spec: stdioSpec(), want: 0},
		{name: "an empty idle block never sleeps", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.Idle = &v1alpha1.IdlePolicy{} }), want: 0},
		{name: "0 never sleeps", spec: stdioSpec(withSuspendAfter(0)), want: 0},
		{name: "the floor", spec: stdioSpec(withSuspendAfter(60000)), want: time.Minute},
		{name: "an hour", spec: stdioSpec(withSuspendAfter(3600000)), want: time.Hour},
		{name: "0 on an HTTP server", spec: httpSpec(withSuspendAfter(0)), want: 0},
		{name: "below the floor", spec: stdioSpec(withSuspendAfter(59999)), errType: field.ErrorTypeInvalid},
		{name: "1 ms", spec: stdioSpec(withSuspendAfter(1)), errType: field.ErrorTypeInvalid},
		{name: "negative", spec: stdioSpec(withSuspendAfter(-1)), errType: field.ErrorTypeInvalid},
		{name: "an HTTP server", spec: httpSpec(withSuspendAfter(60000)), errType: field.ErrorTypeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, nil, allLocal)
			if tc.errType == "" {
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if p.SuspendAfter != tc.want {
					t.Errorf("SuspendAfter = %v, want %v", p.SuspendAfter, tc.want)
				}
				return
			}
			errs := invalidErrs(t, err)
			if len(errs) != 1 || errs[0].Field != path || errs[0].Type != tc.errType {
				t.Errorf("errors = %v, want one %s on %s", errs, tc.errType, path)
			}
		})
	}
}

// TestSuspendAfterIsNotPartOfTheConnection: a new suspendAfterMs is applied
// to the running supervisor, never by reconnecting.
func TestSuspendAfterIsNotPartOfTheConnection(t *testing.T) {
	before := mustResolve(t, stdioSpec(), nil)
	after := mustResolve(t, stdioSpec(withSuspendAfter(120000)), nil)
	if before.Fingerprint() == after.Fingerprint() {
		t.Error("Fingerprint ignores suspendAfterMs")
	}
	if before.ConnectionFingerprint() != after.ConnectionFingerprint() {
		t.Error("ConnectionFingerprint changes with suspendAfterMs")
	}
	if after.SuspendAfter != 2*time.Minute {
		t.Errorf("SuspendAfter = %v", after.SuspendAfter)
	}
}
