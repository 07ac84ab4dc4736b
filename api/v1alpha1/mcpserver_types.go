package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestartedAtAnnotation hot-swaps the connection when its value changes: the
// `kubectl rollout restart` of this API, and the way back from a terminal
// phase without editing the spec.
const RestartedAtAnnotation = "mcpbridge.dev/restartedAt"

// Transport names how the manager talks to an MCP server.
// +kubebuilder:validation:Enum=stdio;streamable-http
type Transport string

const (
	// TransportStdio runs the server as a process that speaks on its stdin
	// and stdout, in the manager or in its own Pod.
	TransportStdio Transport = "stdio"
	// TransportStreamableHTTP connects to a Streamable HTTP endpoint.
	TransportStreamableHTTP Transport = "streamable-http"
)

// McpServerSpec describes one MCP server and how to keep its connection alive.
//
// +kubebuilder:validation:XValidation:rule="self.transport != 'stdio' || has(self.stdio)",message="spec.stdio is required when spec.transport is stdio",fieldPath=".stdio"
// +kubebuilder:validation:XValidation:rule="self.transport == 'stdio' || !has(self.stdio)",message="spec.stdio is forbidden unless spec.transport is stdio",fieldPath=".stdio"
// +kubebuilder:validation:XValidation:rule="self.transport != 'streamable-http' || has(self.streamableHttp)",message="spec.streamableHttp is required when spec.transport is streamable-http",fieldPath=".streamableHttp"
// +kubebuilder:validation:XValidation:rule="self.transport == 'streamable-http' || !has(self.streamableHttp)",message="spec.streamableHttp is forbidden unless spec.transport is streamable-http",fieldPath=".streamableHttp"
// +kubebuilder:validation:XValidation:rule="self.transport == 'stdio' || !has(self.idle) || !has(self.idle.suspendAfterMs) || self.idle.suspendAfterMs == 0",message="spec.idle.suspendAfterMs applies only to stdio servers",fieldPath=".idle.suspendAfterMs"
type McpServerSpec struct {
	// ServerName qualifies the server's tools as mcp__<serverName>__<tool>.
	// It defaults to metadata.name, which must then match the same pattern.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]{1,32}$`
	ServerName string `json:"serverName,omitempty"`

	// Transport selects stdio or streamable-http; exactly the matching
	// block below must be set.
	Transport Transport `json:"transport"`

	// Stdio runs the server as a process on stdin and stdout. Required iff
	// transport is stdio.
	// +optional
	Stdio *StdioTransport `json:"stdio,omitempty"`

	// StreamableHTTP connects to a remote endpoint. Required iff transport
	// is streamable-http.
	// +optional
	StreamableHTTP *StreamableHTTPTransport `json:"streamableHttp,omitempty"`

	// Tools filters which of the server's tools are published (to the
	// registry, status and the gateway) by raw tool name. Unset publishes
	// every tool.
	// +optional
	Tools *ToolFilter `json:"tools,omitempty"`

	// ToolCallTimeoutMs bounds each tools/call.
	// +optional
	// +kubebuilder:default=60000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	ToolCallTimeoutMs *int32 `json:"toolCallTimeoutMs,omitempty"`

	// ConnectionTimeoutMs is one total budget per connection generation:
	// transport start, initialization and every tools/list page.
	// +optional
	// +kubebuilder:default=60000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	ConnectionTimeoutMs *int32 `json:"connectionTimeoutMs,omitempty"`

	// HealthCheckIntervalMs is how often an idle connection is probed;
	// 0 disables the probe.
	// +optional
	// +kubebuilder:default=30000
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	HealthCheckIntervalMs *int32 `json:"healthCheckIntervalMs,omitempty"`

	// FailOnStartupError makes a failed first attempt final (phase Failed,
	// reason StartupFailed): no retries until the next hot swap. Unset, the
	// first attempt is attempt 1 of reconnect.maxAttempts.
	// +optional
	// +kubebuilder:default=false
	FailOnStartupError *bool `json:"failOnStartupError,omitempty"`

	// Reconnect is the backoff policy after a lost connection.
	// +optional
	// +kubebuilder:default={}
	Reconnect *ReconnectPolicy `json:"reconnect,omitempty"`

	// Idle lets a stdio server sleep while no agent calls it, and wake on
	// the next tools/call. Unset, the server never sleeps.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`
}

// IdlePolicy says when a stdio server sleeps. A sleeping server's connection
// is closed and its process ended (its Deployment scaled to 0 in the Pod
// runtime); its tools stay published, and the next tools/call wakes it.
// Changing it applies in place, without reconnecting. See docs/design.md,
// "Idle servers".
type IdlePolicy struct {
	// SuspendAfterMs is how long the server stays connected without a
	// tools/call before it sleeps; a call in flight keeps it awake. 0 (or
	// unset) never suspends; otherwise at least 60000. stdio only.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	// +kubebuilder:validation:XValidation:rule="self == 0 || self >= 60000",message="spec.idle.suspendAfterMs must be 0 (never) or at least 60000"
	SuspendAfterMs *int32 `json:"suspendAfterMs,omitempty"`
}

// StdioTransport runs an MCP server as a process speaking JSON-RPC on its
// stdin and stdout: a child of the manager (the Local runtime) or, through
// the shim, in its own Pod (the Pod runtime). See docs/design.md, "Runtimes
// for stdio servers".
type StdioTransport struct {
	// Command is run directly, never through a shell.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Command string `json:"command"`

	// Args are passed to the command as they are.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=32768
	Args []string `json:"args,omitempty"`

	// Env is added to the child's scrubbed environment (Local runtime) or
	// becomes the container's env, references resolved by the kubelet (Pod
	// runtime). Each entry sets value, or valueFrom.secretKeyRef or
	// valueFrom.configMapKeyRef in the resource's namespace; other sources
	// are refused.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || !has(e.value) || e.value == '')",message="spec.stdio.env: an entry sets value or valueFrom, not both"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || (has(e.valueFrom.secretKeyRef) ? !has(e.valueFrom.configMapKeyRef) : has(e.valueFrom.configMapKeyRef)))",message="spec.stdio.env: valueFrom sets exactly one of secretKeyRef or configMapKeyRef"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || (!has(e.valueFrom.fieldRef) && !has(e.valueFrom.resourceFieldRef) && !has(e.valueFrom.fileKeyRef)))",message="spec.stdio.env: valueFrom supports only secretKeyRef and configMapKeyRef"
	// +kubebuilder:validation:XValidation:rule="self.all(e, size(e.name) > 0)",message="spec.stdio.env: a name must not be empty"
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Cwd is the child's working directory; empty means the manager's
	// (Local runtime) or the image's (Pod runtime, where it must be an
	// absolute path: it becomes the container's workingDir).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Cwd string `json:"cwd,omitempty"`

	// Image is the container image the server runs in. Set, the server
	// runs in its own Pod in this namespace (the Pod runtime), with the
	// manager's shim as the container's entrypoint: the image needs the
	// command and nothing of ours. Unset, the cluster decides: a child of
	// the manager (the Local runtime) in a namespace the administrator
	// allows, otherwise a Pod with a default image for npx, node, uvx, uv,
	// python and python3, and an invalid spec for any other command.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self == '' || self.matches('^(((?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\\[[a-fA-F0-9:]+\\])(:[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')`,message="spec.stdio.image must be an image reference such as ghcr.io/org/server:1.2 or registry/name@sha256:<digest>"
	Image string `json:"image,omitempty"`

	// ImagePullPolicy is the Pod's pull policy for image: Always,
	// IfNotPresent (when unset) or Never. Pod runtime only; a Local server
	// ignores it.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources are the server container's cpu, memory and
	// ephemeral-storage requests and limits. Each one the spec leaves out
	// takes its default (requests cpu 50m, memory 64Mi; limits cpu 500m,
	// memory 256Mi), moved to the spec's own request or limit of the same
	// resource where the default would break requests <= limits. A request
	// above its limit or a negative quantity is an invalid spec. Pod
	// runtime only.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.claims) || size(self.claims) == 0",message="spec.stdio.resources.claims is not supported: the server's Pod has no resource claims"
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || self.requests.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="spec.stdio.resources.requests: only cpu, memory and ephemeral-storage may be requested"
	// +kubebuilder:validation:XValidation:rule="!has(self.limits) || self.limits.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="spec.stdio.resources.limits: only cpu, memory and ephemeral-storage may be limited"
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ServiceAccountName runs the server's Pod as this ServiceAccount of
	// the namespace, with its token mounted. Empty: the namespace's
	// default ServiceAccount, and no token mounted. Pod runtime only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// StreamableHTTPTransport connects to an MCP server's Streamable HTTP endpoint.
type StreamableHTTPTransport struct {
	// URL is the absolute http or https address of the MCP endpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="spec.streamableHttp.url must be an absolute http or https URL"
	URL string `json:"url"`

	// Headers are sent with every request; names are HTTP tokens and unique
	// (case-insensitively).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))",message="spec.streamableHttp.headers: header names must be unique (case-insensitive)"
	Headers []HTTPHeader `json:"headers,omitempty"`
}

// HTTPHeader is one request header with a literal value or one from a Secret.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="spec.streamableHttp.headers: an entry sets exactly one of value or valueFrom"
type HTTPHeader struct {
	// Name is an HTTP header field name (an RFC 9110 token).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern="^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
	Name string `json:"name"`

	// Value is a literal header value.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\r') && !self.contains('\\n')",message="spec.streamableHttp.headers: a value has no line breaks"
	Value *string `json:"value,omitempty"`

	// ValueFrom reads the value from a Secret in the resource's namespace.
	// +optional
	ValueFrom *HeaderValueSource `json:"valueFrom,omitempty"`
}

// HeaderValueSource names where a header value comes from.
type HeaderValueSource struct {
	// SecretKeyRef selects a key of a Secret in the resource's namespace.
	SecretKeyRef corev1.SecretKeySelector `json:"secretKeyRef"`
}

// ToolFilter publishes the tools whose raw names match an include pattern
// (every tool when include is empty) and no exclude pattern: exclude wins.
// Changing it republishes the last tool list fetched, without reconnecting.
type ToolFilter struct {
	// Include lists the patterns a raw tool name must match one of; empty
	// includes every tool.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Include []ToolGlob `json:"include,omitempty"`

	// Exclude lists patterns whose matching tools are not published, even
	// when an include pattern matches them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Exclude []ToolGlob `json:"exclude,omitempty"`
}

// ToolGlob is a pattern over raw tool names with the syntax of Go's
// path.Match: * matches any run of characters but /, ? one character but /,
// [a-z] and [^a-z] a character in or not in a class, and a backslash
// matches the next character literally.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule=`self.matches('^(?s)(?:[^\\\\\\[]|\\\\.|\\[(?:\\^(?:[^\\\\\\-\\]]|\\\\.)(?:-(?:[^\\\\\\-\\]]|\\\\.))?|(?:[^\\\\\\-\\]^]|\\\\.)(?:-(?:[^\\\\\\-\\]]|\\\\.))?)(?:(?:[^\\\\\\-\\]]|\\\\.)(?:-(?:[^\\\\\\-\\]]|\\\\.))?)*\\])*$')`,message="must be a path.Match glob: *, ?, closed non-empty classes such as [a-z] or [^a-z], and \\ escaping the next character"
type ToolGlob string

// ReconnectPolicy is the bounded exponential backoff after a lost connection.
// +kubebuilder:validation:XValidation:rule="!has(self.initialDelayMs) || !has(self.maxDelayMs) || self.initialDelayMs <= self.maxDelayMs",message="spec.reconnect.initialDelayMs must be less than or equal to spec.reconnect.maxDelayMs",fieldPath=".initialDelayMs"
type ReconnectPolicy struct {
	// Enabled turns reconnection on; off, a lost connection is final until
	// the next hot swap.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// InitialDelayMs is the delay before the first reconnect of an outage
	// (after a lost connection, or after a failed first attempt); it doubles
	// per reconnect up to maxDelayMs.
	// +optional
	// +kubebuilder:default=500
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	InitialDelayMs *int32 `json:"initialDelayMs,omitempty"`

	// MaxDelayMs caps the delay, and is the stability window: a connection
	// that stays up this long ends the outage and restores the attempt
	// budget; one lost sooner counts as a failed attempt.
	// +optional
	// +kubebuilder:default=30000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	MaxDelayMs *int32 `json:"maxDelayMs,omitempty"`

	// MaxAttempts is the budget of consecutive failed attempts per outage.
	// Every attempt that does not end in a stable connection counts: one
	// that fails (the first connection at startup included) and one whose
	// connection is lost within maxDelayMs. A loss after a stable connection
	// starts a fresh budget. When it is spent, the tools are unregistered and
	// the phase is Failed (ReconnectExhausted) until a hot swap.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// McpServer runs one MCP server connection and publishes its tools.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcps,categories=mcpbridge
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.status.serverName`
// +kubebuilder:printcolumn:name="Transport",type=string,JSONPath=`.spec.transport`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.failedAttempts`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.status.connectionGeneration`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.status.runtime`,priority=1
// +kubebuilder:printcolumn:name="Replica",type=string,JSONPath=`.status.replica`,priority=1
// +kubebuilder:validation:XValidation:rule="has(self.spec.serverName) || self.metadata.name.matches('^[A-Za-z0-9_-]{1,32}$')",message="spec.serverName is required when metadata.name does not match ^[A-Za-z0-9_-]{1,32}$"
type McpServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec McpServerSpec `json:"spec"`
	// Status is what the operator reports; observedGeneration reads -1 until
	// the operator first writes it.
	// +optional
	// +kubebuilder:default={observedGeneration:-1}
	Status McpServerStatus `json:"status,omitempty"`
}

// McpServerList is a list of McpServer.
//
// +kubebuilder:object:root=true
type McpServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []McpServer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&McpServer{}, &McpServerList{})
}
