package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/registry"
)

// verdict is what one reconcile concluded about a resource: a phase with
// the Ready reason and message, and the supervisor's snapshot when one runs.
type verdict struct {
	phase   v1alpha1.Phase
	reason  string
	message string
	snap    *bridge.Snapshot
}

// verdictFromSnapshot is a running supervisor's phase and reason, which
// are api/v1alpha1's, with a message written from its snapshot. A
// connection none of whose tools could be published is a Conflict, which
// only the controller reports.
func verdictFromSnapshot(sn bridge.Snapshot) verdict {
	v := verdict{phase: sn.Phase, reason: sn.Reason, message: sn.Message, snap: &sn}
	switch sn.Phase {
	case v1alpha1.PhaseReady:
		if sn.SyncConflict != "" && len(sn.Tools) == 0 {
			// Connected, but none of its tools could be published.
			// See docs/design.md, "Tool registry and names".
			v.phase, v.reason = v1alpha1.PhaseConflict, v1alpha1.ReasonServerNameConflict
			if sn.SyncReason == v1alpha1.ReasonToolBudgetExceeded {
				v.reason = sn.SyncReason
			}
			v.message = "Connected, but no tool could be published: " + sn.SyncConflict
			break
		}
		v.message = connectedMessage(sn)
	case v1alpha1.PhaseIdle:
		// Asleep and healthy (kstatus: Current): its tools stay published.
		// See docs/design.md, "Idle servers".
		v.message = fmt.Sprintf("Idle: suspended without a tool call; %d tools published, the next tool call wakes the server", len(sn.Tools))
	case v1alpha1.PhaseReconnecting:
		v.message = "Connection lost" + errorSuffix(sn) + attemptSuffix(sn)
	case v1alpha1.PhaseConnecting:
		v.message = "Connecting to the server" + errorSuffix(sn) + attemptSuffix(sn)
	case v1alpha1.PhasePending:
		v.message = "Waiting for the connection supervisor to start"
	}
	return v
}

func connectedMessage(sn bridge.Snapshot) string {
	msg := fmt.Sprintf("Connected; %d tools published", len(sn.Tools))
	if sn.SyncConflict != "" {
		msg += "; the latest tool list was not published: " + sn.SyncConflict
	}
	return msg
}

func errorSuffix(sn bridge.Snapshot) string {
	if sn.LastError == nil {
		return ""
	}
	return ": " + sn.LastError.Error()
}

func attemptSuffix(sn bridge.Snapshot) string {
	if sn.Attempt == 0 {
		return ""
	}
	return fmt.Sprintf("; retrying in %dms (attempt %d of %d)", sn.RetryDelay.Milliseconds(), sn.Attempt, sn.MaxAttempts)
}

// applyStatus writes the verdict into obj's status. Fields that only a
// running supervisor knows are cleared when none runs; the connection
// generation never goes back.
func applyStatus(obj *v1alpha1.McpServer, serverName string, v verdict) {
	st := &obj.Status
	st.ObservedGeneration = obj.Generation
	st.Phase, st.ServerName = v.phase, serverName
	if sn := v.snap; sn != nil {
		applySnapshot(st, *sn)
	} else {
		st.FailedAttempts, st.ToolCount, st.Tools, st.ToolsTruncated = 0, 0, nil, false
		st.ServerInfo, st.NextRetryTime = nil, nil
		st.Runtime, st.PodName = "", ""
	}
	setConditions(obj, v)
}

func applySnapshot(st *v1alpha1.McpServerStatus, sn bridge.Snapshot) {
	st.ConnectionGeneration = max(st.ConnectionGeneration, sn.Generation)
	st.FailedAttempts = int32(sn.FailedAttempts)
	if sn.Phase == v1alpha1.PhaseReady || sn.Phase == v1alpha1.PhaseIdle {
		st.FailedAttempts = 0 // connected, or asleep after a connection: no outage in progress
	}
	st.Runtime, st.PodName = sn.Runtime, sn.PodName
	st.ToolCount = int32(len(sn.Tools))
	st.Tools, st.ToolsTruncated = statusTools(sn.Tools)
	st.ServerInfo = nil
	if si := sn.ServerInfo; si != nil {
		st.ServerInfo = &v1alpha1.ServerInfo{Name: si.Name, Version: si.Version, ProtocolVersion: si.ProtocolVersion}
	}
	st.LastConnectedTime = statusTime(sn.LastConnected)
	st.NextRetryTime = nil
	if sn.Phase == v1alpha1.PhaseReconnecting || sn.Phase == v1alpha1.PhaseConnecting {
		st.NextRetryTime = statusTime(sn.NextRetry)
	}
	switch le := sn.LastError; {
	case le != nil:
		st.LastError = &v1alpha1.LastError{Stage: le.Stage, Message: bridge.Truncate(le.Message(), maxMessage)}
	case st.LastError != nil && st.LastError.Stage == bridge.StagePod:
		// A reason to wait for the Pod, not an error, and over: the
		// supervisor cleared it. Real errors stay until the next one.
		st.LastError = nil
	}
}

// maxMessage keeps messages from upstream servers from bloating status.
const maxMessage = 1024

// maxToolBytes keeps status.tools, and so the whole status, under 64 KiB
// even when raw names are long.
// See docs/design.md, "Status and conditions".
const maxToolBytes = 48 << 10

// statusTools lists tools sorted by name, at most MaxStatusTools of them and
// at most maxToolBytes of names; truncated says some were left out.
func statusTools(tools []registry.Tool) (out []v1alpha1.ToolStatus, truncated bool) {
	size := 0
	for i, t := range tools {
		ts := v1alpha1.ToolStatus{Name: t.Name, RawName: bridge.Truncate(t.RawName, 256)}
		size += len(ts.Name) + len(ts.RawName) + 32 // JSON keys and quotes
		if i == v1alpha1.MaxStatusTools || size > maxToolBytes {
			return out, true
		}
		out = append(out, ts)
	}
	return out, false
}

// statusTime drops sub-second precision, which the API would drop anyway:
// comparing a fresh time with a stored one must not look like a change.
func statusTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

// setConditions stamps Ready, Reconciling and Stalled (kstatus) with the
// observed generation; a transition time moves only when a status flips.
// Ready is always there; Reconciling and Stalled only while they hold, and
// removed otherwise, as Flux's conditions do (kstatus reads a missing one
// as False).
func setConditions(obj *v1alpha1.McpServer, v verdict) {
	progressing := v.phase == v1alpha1.PhasePending || v.phase == v1alpha1.PhaseConnecting || v.phase == v1alpha1.PhaseReconnecting
	// A missing Secret heals by itself: progressing, not stalled.
	stalled := v.phase == v1alpha1.PhaseFailed || v.phase == v1alpha1.PhaseInvalid || v.phase == v1alpha1.PhaseConflict
	msg := bridge.Truncate(v.message, maxMessage)
	set := func(t string, status metav1.ConditionStatus) {
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: v.reason, Message: msg, ObservedGeneration: obj.Generation,
		})
	}
	mark := func(t string, on bool) {
		if on {
			set(t, metav1.ConditionTrue)
		} else {
			meta.RemoveStatusCondition(&obj.Status.Conditions, t)
		}
	}
	ready := metav1.ConditionFalse
	if v.phase == v1alpha1.PhaseReady || v.phase == v1alpha1.PhaseIdle {
		ready = metav1.ConditionTrue
	}
	set(v1alpha1.ConditionReady, ready)
	mark(v1alpha1.ConditionReconciling, progressing && !stalled)
	mark(v1alpha1.ConditionStalled, stalled)
}
