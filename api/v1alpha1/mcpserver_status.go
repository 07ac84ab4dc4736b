package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is the one-word summary of a server's connection.
// +kubebuilder:validation:Enum=Pending;Connecting;Ready;Idle;Reconnecting;Failed;Invalid;Conflict
type Phase string

const (
	PhasePending    Phase = "Pending"
	PhaseConnecting Phase = "Connecting"
	PhaseReady      Phase = "Ready"
	// PhaseIdle: the server sleeps (spec.idle) with its tools published;
	// the next tools/call wakes it.
	PhaseIdle         Phase = "Idle"
	PhaseReconnecting Phase = "Reconnecting"
	PhaseFailed       Phase = "Failed"
	PhaseInvalid      Phase = "Invalid"
	PhaseConflict     Phase = "Conflict"
)

// Runtime is where a stdio server's process runs. See docs/design.md,
// "Choosing a runtime".
// +kubebuilder:validation:Enum=Local;Pod
type Runtime string

const (
	// RuntimeLocal runs the server as a child process of the manager, only
	// in namespaces the administrator allows.
	RuntimeLocal Runtime = "Local"
	// RuntimePod runs the server in its own Pod in the McpServer's
	// namespace, behind the shim.
	RuntimePod Runtime = "Pod"
)

// Condition types; Reconciling and Stalled follow kstatus.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	// ConditionDegraded is True while some live manager replica cannot
	// reach the replica that owns the server (ReasonReplicaUnreachable):
	// the calls that land on it fail. Absent otherwise; it leaves Ready,
	// Reconciling and Stalled as they are, whatever the phase.
	ConditionDegraded = "Degraded"
)

// Reasons of the Ready condition (and of Reconciling/Stalled when they hold).
// The events on an McpServer use the same words for the same transitions;
// the connection supervisor reports its stops and events with them.
const (
	ReasonConnected          = "Connected"
	ReasonConnecting         = "Connecting"
	ReasonReconnecting       = "Reconnecting"
	ReasonReconnectExhausted = "ReconnectExhausted"
	ReasonReconnectDisabled  = "ReconnectDisabled"
	ReasonStartupFailed      = "StartupFailed"
	ReasonCloseTimeout       = "CloseTimeout"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonSecretNotFound     = "SecretNotFound"
	ReasonServerNameConflict = "ServerNameConflict"
	// ReasonPodObjectConflict: the name of the server's Deployment or token
	// Secret is taken by an object this McpServer does not own.
	ReasonPodObjectConflict = "PodObjectConflict"
	// ReasonToolBudgetExceeded: the server's tools were not published
	// because the namespace's published tools would pass their budget
	// (--max-tool-bytes-per-namespace); also the reason of the event.
	ReasonToolBudgetExceeded = "ToolBudgetExceeded"
	// ReasonIdle: the server sleeps after spec.idle.suspendAfterMs without
	// a tools/call; Ready stays True, its tools published.
	ReasonIdle = "Idle"
	// ReasonHandingOver: this replica owns the server now and waits for
	// the replica that held its stdio connection to close it (Pending).
	ReasonHandingOver = "HandingOver"
	// ReasonToolSetTooLarge: the server's tools do not fit the McpToolSet
	// that carries them to the other replicas (Failed).
	ReasonToolSetTooLarge = "ToolSetTooLarge"
	// ReasonReplicaUnreachable (Degraded): a live replica reports that it
	// cannot reach the internal endpoint of the replica that owns the
	// server, so calls for its tools that reach that replica fail.
	ReasonReplicaUnreachable = "ReplicaUnreachable"
)

// Reasons of events on an McpServer that no condition carries.
const (
	// ReasonRecovered: connected again after a lost connection or a failed
	// first attempt.
	ReasonRecovered = "Recovered"
	// ReasonToolsChanged: a re-sync published a different tool set.
	ReasonToolsChanged = "ToolsChanged"
	// ReasonToolNameConflict: a fetched tool set was not published because
	// a public name is held by another server; the previous set stays.
	ReasonToolNameConflict = "ToolNameConflict"
	// ReasonSuspended: the server went to sleep (spec.idle).
	ReasonSuspended = "Suspended"
	// ReasonWoken: a tools/call woke a sleeping server.
	ReasonWoken = "Woken"
)

// MaxStatusTools caps status.tools so that status stays small.
const MaxStatusTools = 512

// McpServerStatus is what the connection supervisor last reported, written by
// the reconciler only when it changed.
type McpServerStatus struct {
	// ObservedGeneration is the metadata.generation this status describes;
	// -1 (the default) until the operator first writes status.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase summarises the connection.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// ServerName is the effective serverName (spec.serverName or metadata.name).
	// +optional
	ServerName string `json:"serverName,omitempty"`

	// Runtime says where a stdio server runs: Local (a child of the
	// manager) or Pod (its own Pod). Empty for streamable-http.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// Replica is the manager replica that owns the server: it runs the
	// supervisor and writes this status (its --replica-name).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Replica string `json:"replica,omitempty"`

	// PodName is the Pod of the current connection generation (Pod runtime
	// only).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName,omitempty"`

	// ConnectionGeneration numbers the latest connection generation; it never
	// decreases, across hot swaps and manager restarts too.
	// +optional
	// +kubebuilder:default=0
	ConnectionGeneration int64 `json:"connectionGeneration"`

	// FailedAttempts counts the consecutive failed attempts of the current
	// outage, at most spec.reconnect.maxAttempts; 0 while Ready.
	// +optional
	// +kubebuilder:default=0
	FailedAttempts int32 `json:"failedAttempts"`

	// ToolCount is the number of published tools, also past the cap of tools.
	// +optional
	// +kubebuilder:default=0
	ToolCount int32 `json:"toolCount"`

	// Tools are the published tools sorted by public name, at most 512.
	// +optional
	// +kubebuilder:validation:MaxItems=512
	Tools []ToolStatus `json:"tools,omitempty"`

	// ToolsTruncated is true when more tools are published than tools lists.
	// +optional
	ToolsTruncated bool `json:"toolsTruncated,omitempty"`

	// ServerInfo is what the server said about itself when it connected.
	// +optional
	ServerInfo *ServerInfo `json:"serverInfo,omitempty"`

	// LastConnectedTime is when the latest generation finished its tool sync.
	// +optional
	LastConnectedTime *metav1.Time `json:"lastConnectedTime,omitempty"`

	// NextRetryTime is set while a reconnect attempt is scheduled.
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`

	// LastError is the most recent failure and the stage it happened in.
	// +optional
	LastError *LastError `json:"lastError,omitempty"`

	// Conditions are Ready, Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ToolStatus names one published tool.
type ToolStatus struct {
	// Name is the public name agents call, mcp__<serverName>__<rawName>.
	Name string `json:"name"`
	// RawName is the name the server itself uses.
	RawName string `json:"rawName"`
}

// ServerInfo identifies the connected server implementation.
type ServerInfo struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// ProtocolVersion is the MCP protocol version negotiated.
	// +optional
	ProtocolVersion string `json:"protocolVersion,omitempty"`
}

// LastError is a failure and where in the connection it happened.
type LastError struct {
	// Stage is transport-start, initialize, tools-list page N, tools-call,
	// health-check, close, or connection (an established connection lost
	// outside any request: the child exited, the session ended).
	Stage string `json:"stage"`
	// Message says what went wrong; it never holds a secret value.
	Message string `json:"message"`
}
