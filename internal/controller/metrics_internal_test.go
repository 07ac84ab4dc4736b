package controller

import (
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// TestPhaseSeries: each McpServer has exactly one mcpbridge_server_phase
// series, for its current phase, whatever phases it went through; deleting
// the server removes it, and other servers' series stay.
func TestPhaseSeries(t *testing.T) {
	cases := []struct {
		name   string
		phases []v1alpha1.Phase
		forget bool
		want   []string
	}{
		{"first phase", []v1alpha1.Phase{v1alpha1.PhasePending}, false, []string{"Pending"}},
		{"a phase replaces the one before", []v1alpha1.Phase{v1alpha1.PhaseConnecting, v1alpha1.PhaseReady}, false, []string{"Ready"}},
		{"through every phase", []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseConnecting, v1alpha1.PhaseReady,
			v1alpha1.PhaseReconnecting, v1alpha1.PhaseFailed}, false, []string{"Failed"}},
		{"the same phase again", []v1alpha1.Phase{v1alpha1.PhaseInvalid, v1alpha1.PhaseInvalid}, false, []string{"Invalid"}},
		{"a phase the API adds later", []v1alpha1.Phase{v1alpha1.PhaseReady, "Idle", v1alpha1.PhaseConflict}, false, []string{"Conflict"}},
		{"deleted", []v1alpha1.Phase{v1alpha1.PhaseReady, v1alpha1.PhaseFailed}, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := "phase-" + tc.name
			recordPhase(ns, "other", v1alpha1.PhaseReady)
			for _, p := range tc.phases {
				recordPhase(ns, "srv", p)
			}
			if tc.forget {
				forgetMetrics(ns, "srv")
			}
			if got := phasesOf(t, ns, "srv"); !slices.Equal(got, tc.want) {
				t.Errorf("phase series %v, want %v", got, tc.want)
			}
			if got := phasesOf(t, ns, "other"); !slices.Equal(got, []string{"Ready"}) {
				t.Errorf("another server's phase series %v, want [Ready]", got)
			}
			forgetMetrics(ns, "srv")
			forgetMetrics(ns, "other")
		})
	}
}

// phasesOf lists the phases of the server's series whose value is 1; a
// series of any other value fails the test.
func phasesOf(t *testing.T, ns, name string) []string {
	t.Helper()
	var out []string
	for _, p := range []string{"Pending", "Connecting", "Ready", "Reconnecting", "Failed", "Invalid", "Conflict", "Idle"} {
		m, err := serverPhase.GetMetricWithLabelValues(ns, name, p)
		if err != nil {
			t.Fatal(err)
		}
		// GetMetricWithLabelValues creates a missing series at 0: read it,
		// then remove it again unless it held a value.
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		switch v := pb.GetGauge().GetValue(); v {
		case 1:
			out = append(out, p)
		case 0:
			serverPhase.DeleteLabelValues(ns, name, p)
		default:
			t.Fatalf("series %s/%s %s = %v", ns, name, p, v)
		}
	}
	return out
}
