package podruntime

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// namespaceNameLabel is the label the apiserver puts on every Namespace
// with its own name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// NetworkPolicy admits ingress to obj's server Pod only at the shim's port
// and only from the manager's Pods (opts.ManagerPodLabels in
// opts.ManagerNamespace, or in any namespace when that is empty): nothing
// else in the cluster may knock on the tunnel. It has the Deployment's
// labels and owner; its name is the Deployment's. See docs/design.md, "The
// shim and the tunnel".
func NetworkPolicy(obj *v1alpha1.McpServer, opts Options) (*networkingv1.NetworkPolicy, error) {
	if len(opts.ManagerPodLabels) == 0 {
		return nil, errors.New("podruntime: no labels of the manager's Pods to admit")
	}
	opts = opts.withDefaults()
	ns := &metav1.LabelSelector{}
	if opts.ManagerNamespace != "" {
		ns.MatchLabels = map[string]string{namespaceNameLabel: opts.ManagerNamespace}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            DeploymentName(obj.Name),
			Namespace:       obj.Namespace,
			Labels:          Labels(obj.Name),
			OwnerReferences: []metav1.OwnerReference{ownerRef(obj)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: Labels(obj.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{
					Protocol: ptr.To(corev1.ProtocolTCP),
					Port:     ptr.To(intstr.FromInt32(opts.Port)),
				}},
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: ns,
					PodSelector:       &metav1.LabelSelector{MatchLabels: copyLabels(opts.ManagerPodLabels)},
				}},
			}},
		},
	}, nil
}

func copyLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
