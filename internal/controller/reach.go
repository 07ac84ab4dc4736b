package controller

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/membership"
)

// markReach sets Degraded on a server this replica owns while live
// replicas report that they cannot reach this one's internal endpoint: the
// calls for its tools that reach them fail, though the server itself is
// Ready. Without such a report the condition goes. See docs/design.md,
// "Visible when unreachable".
func (r *McpServerReconciler) markReach(obj *v1alpha1.McpServer) {
	msg := r.unreachedMessage()
	if msg == "" {
		meta.RemoveStatusCondition(&obj.Status.Conditions, v1alpha1.ConditionDegraded)
		return
	}
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReplicaUnreachable,
		Message: msg, ObservedGeneration: obj.Generation,
	})
}

// reachStale reports whether obj's Degraded condition is not what markReach
// would make of it now.
func (r *McpServerReconciler) reachStale(obj *v1alpha1.McpServer, msg string) bool {
	c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionDegraded)
	if c == nil {
		return msg != ""
	}
	return c.Message != msg || c.Reason != v1alpha1.ReasonReplicaUnreachable
}

// unreachedMessage says which replicas cannot reach this one, where to read
// why, and what fails meanwhile; "" when every live replica reaches it. It
// holds no address, error or time, so that it changes only when the set of
// replicas does.
func (r *McpServerReconciler) unreachedMessage() string {
	if r.Replicas == nil {
		return ""
	}
	by := r.Replicas.UnreachedBy()
	if len(by) == 0 {
		return ""
	}
	leases := make([]string, len(by))
	for i, name := range by {
		leases[i] = membership.LeaseName(name)
	}
	who := "Replica " + by[0] + " cannot"
	if len(by) > 1 {
		who = "Replicas " + strings.Join(by, ", ") + " cannot"
	}
	return bridge.Truncate(fmt.Sprintf("%s reach this server's owner, replica %s, at its internal endpoint: calls for its tools "+
		"that reach them fail until they can; the annotation %s of their Leases (%s) says why",
		who, r.Replica, membership.UnreachableAnnotation, strings.Join(leases, ", ")), maxMessage)
}
