package podruntime_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/internal/podruntime"
)

var managerLabels = map[string]string{"app.kubernetes.io/name": "mcpbridge", "app.kubernetes.io/component": "manager"}

func TestNetworkPolicyAdmitsOnlyTheManagerAtTheShimsPort(t *testing.T) {
	obj := server()
	for _, tc := range []struct {
		name      string
		opts      podruntime.Options
		port      int32
		namespace *metav1.LabelSelector
	}{
		{"the manager's namespace", podruntime.Options{ManagerPodLabels: managerLabels, ManagerNamespace: "mcpbridge-system"}, 7420,
			&metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "mcpbridge-system"}}},
		{"another port, namespace unknown", podruntime.Options{ManagerPodLabels: managerLabels, Port: 9000}, 9000,
			&metav1.LabelSelector{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np, err := podruntime.NetworkPolicy(obj, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			d := render(t, obj)
			if np.Name != d.Name || np.Namespace != d.Namespace || !equality.Semantic.DeepEqual(np.Labels, d.Labels) ||
				!equality.Semantic.DeepEqual(np.OwnerReferences, d.OwnerReferences) {
				t.Errorf("meta %+v, want the Deployment's name, labels and owner", np.ObjectMeta)
			}
			if np.APIVersion != "networking.k8s.io/v1" || np.Kind != "NetworkPolicy" {
				t.Errorf("apiVersion %q kind %q", np.APIVersion, np.Kind)
			}
			want := networkingv1.NetworkPolicySpec{
				PodSelector: *d.Spec.Selector,
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(tc.port))}},
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: tc.namespace,
						PodSelector:       &metav1.LabelSelector{MatchLabels: managerLabels},
					}},
				}},
			}
			if !equality.Semantic.DeepEqual(np.Spec, want) {
				t.Errorf("spec\n%+v\nwant\n%+v", np.Spec, want)
			}
		})
	}
	if _, err := podruntime.NetworkPolicy(obj, podruntime.Options{}); err == nil {
		t.Error("a NetworkPolicy without the manager's labels would admit nobody, or everybody")
	}
}
