package chart_test

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestReplicasAreSpreadAndBudgeted checks how the chart runs its replicas
// (README, "Install on a cluster"): two by default, replaced one at a time,
// a PodDisruptionBudget and a soft spread over nodes that select exactly the
// manager's Pods, each of which a value turns off or replaces.
func TestReplicasAreSpreadAndBudgeted(t *testing.T) {
	customSpread := map[string]any{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone",
		"whenUnsatisfiable": "DoNotSchedule", "labelSelector": map[string]any{"matchLabels": map[string]any{"team": "ai"}}}
	cases := []struct {
		name           string
		vals           map[string]any
		replicas       int32
		maxUnavailable *intstr.IntOrString // nil: no PodDisruptionBudget
		spreadKeys     []string            // the constraints' topology keys
	}{
		{"defaults", nil, 2, ptrTo(intstr.FromInt32(1)), []string{"kubernetes.io/hostname"}},
		{"three replicas", map[string]any{"replicaCount": 3}, 3, ptrTo(intstr.FromInt32(1)), []string{"kubernetes.io/hostname"}},
		{"a percentage", map[string]any{"replicaCount": 4, "podDisruptionBudget": map[string]any{"maxUnavailable": "50%"}},
			4, ptrTo(intstr.FromString("50%")), []string{"kubernetes.io/hostname"}},
		{"one replica has nothing to budget", map[string]any{"replicaCount": 1}, 1, nil, []string{"kubernetes.io/hostname"}},
		{"budget off", map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}}, 2, nil, []string{"kubernetes.io/hostname"}},
		{"own constraints replace the default", map[string]any{"topologySpreadConstraints": []any{customSpread}},
			2, ptrTo(intstr.FromInt32(1)), []string{"topology.kubernetes.io/zone"}},
		{"default spread off", map[string]any{"defaultTopologySpread": false}, 2, ptrTo(intstr.FromInt32(1)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, _ := render(t, tc.vals)
			d := managerOf(t, objs)
			g.Expect(*d.Spec.Replicas).To(Equal(tc.replicas))
			g.Expect(d.Spec.Strategy).To(Equal(appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrTo(intstr.FromInt32(1)), MaxUnavailable: ptrTo(intstr.FromInt32(0))}}),
				"a new replica Ready before an old one stops")

			spread := d.Spec.Template.Spec.TopologySpreadConstraints
			var keys []string
			for _, c := range spread {
				keys = append(keys, c.TopologyKey)
			}
			g.Expect(keys).To(Equal(tc.spreadKeys))
			if tc.spreadKeys != nil && tc.vals["topologySpreadConstraints"] == nil {
				g.Expect(spread[0].WhenUnsatisfiable).To(Equal(corev1.ScheduleAnyway), "soft: one node still runs every replica")
				g.Expect(spread[0].MaxSkew).To(Equal(int32(1)))
				g.Expect(spread[0].LabelSelector).To(Equal(d.Spec.Selector), "the spread counts the manager's Pods")
				g.Expect(spread[0].MatchLabelKeys).To(Equal([]string{"pod-template-hash"}))
			}

			pdb := disruptionBudget(t, objs)
			if tc.maxUnavailable == nil {
				g.Expect(pdb).To(BeNil())
				return
			}
			g.Expect(pdb).NotTo(BeNil())
			g.Expect(pdb.Namespace).To(Equal(d.Namespace))
			g.Expect(pdb.Spec.MaxUnavailable).To(Equal(tc.maxUnavailable))
			g.Expect(pdb.Spec.MinAvailable).To(BeNil())
			g.Expect(pdb.Spec.Selector).To(Equal(d.Spec.Selector), "the budget covers the manager's Pods")
		})
	}
}

// disruptionBudget is the render's one PodDisruptionBudget, nil without.
func disruptionBudget(t *testing.T, objs []*unstructured.Unstructured) *policyv1.PodDisruptionBudget {
	t.Helper()
	var out *policyv1.PodDisruptionBudget
	for _, o := range objs {
		if o.GetKind() != "PodDisruptionBudget" {
			continue
		}
		if out != nil {
			t.Fatalf("more than one PodDisruptionBudget")
		}
		out = &policyv1.PodDisruptionBudget{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// spreadOf is the manager's topology spread with each constraint's label
// selector checked to be the Deployment's and then dropped: the chart and
// config/default label their Pods differently.
func spreadOf(t *testing.T, d *appsv1.Deployment) []corev1.TopologySpreadConstraint {
	t.Helper()
	var out []corev1.TopologySpreadConstraint
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		NewWithT(t).Expect(c.LabelSelector).To(Equal(d.Spec.Selector), "the spread of %s", d.Name)
		c.LabelSelector = nil
		out = append(out, c)
	}
	return out
}
