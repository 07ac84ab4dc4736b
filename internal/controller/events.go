package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
)

// emitSupervisorEvents turns the supervisor's queued transitions into
// events on the resource, in order.
func (r *McpServerReconciler) emitSupervisorEvents(obj *v1alpha1.McpServer, sup *bridge.Supervisor) {
	for _, e := range sup.DrainEvents() {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		if e.Reason == v1alpha1.ReasonReconnecting {
			reconnectAttempts.WithLabelValues(obj.Namespace, obj.Name).Inc()
		}
		r.Recorder.Eventf(obj, nil, typ, e.Reason, "Connect", "%s", e.Message)
	}
}

// emitEvents reports the controller's own verdicts (InvalidSpec,
// ServerNameConflict, SecretNotFound) once, when they first appear.
func (r *McpServerReconciler) emitEvents(obj *v1alpha1.McpServer, before *v1alpha1.McpServerStatus, v verdict) {
	if v.snap != nil {
		return
	}
	prev := meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionReady)
	if before.Phase == v.phase && prev != nil && prev.Reason == v.reason && prev.Message == v.message {
		return
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, v.reason, "Validate", "%s", truncate(v.message, maxEventMessage))
}

// maxEventMessage fits the apiserver's limit on an event's note (1 KiB).
const maxEventMessage = 1000
