package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/registry"
)

func TestStatusToolsCapsCountAndBytes(t *testing.T) {
	tools := func(n, rawLen int) []registry.Tool {
		out := make([]registry.Tool, n)
		for i := range out {
			raw := fmt.Sprintf("%0*d", rawLen, i)
			out[i] = registry.Tool{Name: registry.PublicName("srv", raw), RawName: raw}
		}
		return out
	}
	cases := []struct {
		name          string
		tools         []registry.Tool
		wantLen       int
		wantTruncated bool
	}{
		{"none", nil, 0, false},
		{"a few", tools(3, 8), 3, false},
		{"exactly the cap", tools(v1alpha1.MaxStatusTools, 8), v1alpha1.MaxStatusTools, false},
		{"one past the cap", tools(v1alpha1.MaxStatusTools+1, 8), v1alpha1.MaxStatusTools, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated := statusTools(tc.tools)
			if len(got) != tc.wantLen || truncated != tc.wantTruncated {
				t.Fatalf("len %d truncated %v, want %d %v", len(got), truncated, tc.wantLen, tc.wantTruncated)
			}
		})
	}
	t.Run("long raw names stay under 64 KiB of status", func(t *testing.T) {
		obj := &v1alpha1.McpServer{}
		obj.Status.Tools, obj.Status.ToolsTruncated = statusTools(tools(512, 300))
		b, err := json.Marshal(obj.Status)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64<<10 || !obj.Status.ToolsTruncated {
			t.Fatalf("status is %d bytes, truncated %v", len(b), obj.Status.ToolsTruncated)
		}
		if !strings.HasPrefix(obj.Status.Tools[0].Name, "mcp__srv__") {
			t.Fatalf("unexpected first tool %q", obj.Status.Tools[0].Name)
		}
	})
}

func TestVerdictAndConditions(t *testing.T) {
	tool := registry.Tool{Name: "mcp__a__x", RawName: "x"}
	cases := []struct {
		name                          string
		v                             verdict
		phase                         v1alpha1.Phase
		reason                        string
		ready, reconciling, stalledOn bool
	}{
		{"ready", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReady, Reason: v1alpha1.ReasonConnected, Tools: []registry.Tool{tool}}),
			v1alpha1.PhaseReady, v1alpha1.ReasonConnected, true, false, false},
		{"a refused re-sync keeps Ready with the last good tools",
			verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReady, Reason: v1alpha1.ReasonConnected, Tools: []registry.Tool{tool}, SyncConflict: "held"}),
			v1alpha1.PhaseReady, v1alpha1.ReasonConnected, true, false, false},
		{"connected with no tool publishable is a conflict",
			verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReady, Reason: v1alpha1.ReasonConnected, SyncConflict: "held"}),
			v1alpha1.PhaseConflict, v1alpha1.ReasonServerNameConflict, false, false, true},
		{"connected with no tool under the namespace's tool budget says so",
			verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReady, Reason: v1alpha1.ReasonConnected, SyncConflict: "over",
				SyncReason: v1alpha1.ReasonToolBudgetExceeded}),
			v1alpha1.PhaseConflict, v1alpha1.ReasonToolBudgetExceeded, false, false, true},
		{"reconnecting", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReconnecting, Reason: v1alpha1.ReasonReconnecting, Attempt: 1, MaxAttempts: 3}),
			v1alpha1.PhaseReconnecting, v1alpha1.ReasonReconnecting, false, true, false},
		{"exhausted", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonReconnectExhausted}),
			v1alpha1.PhaseFailed, v1alpha1.ReasonReconnectExhausted, false, false, true},
		{"a missing Secret is progressing, not stalled",
			verdict{phase: v1alpha1.PhasePending, reason: v1alpha1.ReasonSecretNotFound, message: "Waiting"},
			v1alpha1.PhasePending, v1alpha1.ReasonSecretNotFound, false, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &v1alpha1.McpServer{}
			obj.Generation = 4
			applyStatus(obj, "a", tc.v)
			if obj.Status.Phase != tc.phase {
				t.Fatalf("phase %s, want %s", obj.Status.Phase, tc.phase)
			}
			// Ready is always present; Reconciling and Stalled only when
			// True (kstatus, Flux): the opposite one is removed.
			if got := findCondition(obj, v1alpha1.ConditionReady); got == nil || (got.Status == "True") != tc.ready ||
				got.ObservedGeneration != 4 || got.Reason != tc.reason {
				t.Fatalf("Ready = %+v, want True=%v reason %s at generation 4", got, tc.ready, tc.reason)
			}
			for _, c := range []struct {
				typ string
				on  bool
			}{{v1alpha1.ConditionReconciling, tc.reconciling}, {v1alpha1.ConditionStalled, tc.stalledOn}} {
				got := findCondition(obj, c.typ)
				if !c.on {
					if got != nil {
						t.Fatalf("%s = %+v, want it absent", c.typ, got)
					}
					continue
				}
				if got == nil || got.Status != "True" || got.ObservedGeneration != 4 || got.Reason != tc.reason {
					t.Fatalf("%s = %+v, want True reason %s at generation 4", c.typ, got, tc.reason)
				}
			}
		})
	}
}

// A resource that leaves a terminal or progressing phase loses the
// condition that said so, instead of keeping it as False.
func TestConditionsOfAPhaseThatEndedAreRemoved(t *testing.T) {
	obj := &v1alpha1.McpServer{}
	applyStatus(obj, "a", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonReconnectExhausted}))
	if findCondition(obj, v1alpha1.ConditionStalled) == nil {
		t.Fatal("Failed without Stalled")
	}
	applyStatus(obj, "a", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseConnecting}))
	if c := findCondition(obj, v1alpha1.ConditionStalled); c != nil {
		t.Fatalf("Stalled kept after the resource left Failed: %+v", c)
	}
	if c := findCondition(obj, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Reconciling = %+v while connecting", c)
	}
	applyStatus(obj, "a", verdictFromSnapshot(bridge.Snapshot{Phase: v1alpha1.PhaseReady}))
	if c := findCondition(obj, v1alpha1.ConditionReconciling); c != nil {
		t.Fatalf("Reconciling kept after Ready: %+v", c)
	}
	if len(obj.Status.Conditions) != 1 {
		t.Fatalf("conditions %+v, want Ready alone", obj.Status.Conditions)
	}
}

func findCondition(obj *v1alpha1.McpServer, t string) *metav1.Condition {
	for i := range obj.Status.Conditions {
		if obj.Status.Conditions[i].Type == t {
			return &obj.Status.Conditions[i]
		}
	}
	return nil
}
