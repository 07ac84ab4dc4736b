package policy_test

import (
	"strings"
	"testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

func TestToolFilterAllows(t *testing.T) {
	cases := []struct {
		name    string
		filter  policy.ToolFilter
		allowed []string
		refused []string
	}{
		{name: "empty publishes everything", allowed: []string{"echo", "delete_repo", "a/b", ""}},
		{name: "include", filter: policy.ToolFilter{Include: []string{"get_*", "create_issue"}},
			allowed: []string{"get_", "get_issue", "create_issue"}, refused: []string{"create_pr", "echo", "Get_issue"}},
		{name: "exclude", filter: policy.ToolFilter{Exclude: []string{"delete_*", "*_admin"}},
			allowed: []string{"echo", "get_admins"}, refused: []string{"delete_repo", "delete_", "user_admin"}},
		{name: "exclude wins over include", filter: policy.ToolFilter{Include: []string{"*"}, Exclude: []string{"delete_*"}},
			allowed: []string{"echo"}, refused: []string{"delete_repo"}},
		{name: "classes, ? and escapes", filter: policy.ToolFilter{Include: []string{"[gs]et_?", `star\*`, "[^a-z]*"}},
			allowed: []string{"get_x", "set_y", "star*", "Zeta"}, refused: []string{"get_xy", "starry", "alpha"}},
		{name: "* does not cross /", filter: policy.ToolFilter{Include: []string{"ns/*"}},
			allowed: []string{"ns/tool"}, refused: []string{"ns/a/b", "ns"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range tc.allowed {
				if !tc.filter.Allows(n) {
					t.Errorf("Allows(%q) = false", n)
				}
			}
			for _, n := range tc.refused {
				if tc.filter.Allows(n) {
					t.Errorf("Allows(%q) = true", n)
				}
			}
		})
	}
}

// TestToolFilterIsNotPartOfTheConnection: a new filter changes the
// fingerprint (the resource changed) but not the connection's, so that the
// controller can apply it without reconnecting.
func TestToolFilterIsNotPartOfTheConnection(t *testing.T) {
	spec := httpSpec()
	before := mustResolve(t, spec, nil)
	spec.Tools = &v1alpha1.ToolFilter{Include: []v1alpha1.ToolGlob{"get_*"}, Exclude: []v1alpha1.ToolGlob{"get_secret"}}
	after := mustResolve(t, spec, nil)
	if got := after.Tools; !got.Equal(policy.ToolFilter{Include: []string{"get_*"}, Exclude: []string{"get_secret"}}) {
		t.Fatalf("Tools = %+v", got)
	}
	if before.Fingerprint() == after.Fingerprint() {
		t.Error("Fingerprint ignores the tool filter")
	}
	if before.ConnectionFingerprint() != after.ConnectionFingerprint() {
		t.Error("ConnectionFingerprint changes with the tool filter")
	}
	spec.ToolCallTimeoutMs = ptr32(1234)
	if mustResolve(t, spec, nil).ConnectionFingerprint() == after.ConnectionFingerprint() {
		t.Error("ConnectionFingerprint ignores a timeout")
	}
	if s := after.String(); !strings.Contains(s, "get_secret") {
		t.Errorf("String() = %s, want the filter in it", s)
	}
}

func ptr32(v int32) *int32 { return &v }
