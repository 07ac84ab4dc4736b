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
		if e.Reason == v1alpha1.ReasonReconnecting {
			reconnectAttempts.WithLabelValues(obj.Namespace, obj.Name).Inc()
		}
		r.record(obj, e.Warning, e.Reason, "Connect", e.Message)
	}
}

// emitEvents reports the controller's own verdicts (InvalidSpec,
// ServerNameConflict, SecretNotFound, CloseTimeout of a replaced
// supervisor) once, when they first appear.
func (r *McpServerReconciler) emitEvents(obj *v1alpha1.McpServer, before *v1alpha1.McpServerStatus, v verdict) {
	if v.snap != nil {
		return
	}
	prev := meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionReady)
	if before.Phase == v.phase && prev != nil && prev.Reason == v.reason && prev.Message == v.message {
		return
	}
	action := "Validate"
	if v.reason == v1alpha1.ReasonCloseTimeout {
		action = "Dispose"
	}
	r.record(obj, true, v.reason, action, v.message)
}

// record posts one event; reasons are the API's (v1alpha1.Reason*).
func (r *McpServerReconciler) record(obj *v1alpha1.McpServer, warning bool, reason, action, message string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(obj, nil, typ, reason, action, "%s", bridge.Truncate(message, maxEventMessage))
}

// maxEventMessage fits the apiserver's limit on an event's note (1 KiB).
const maxEventMessage = 1000
