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
	// TransportStdio runs the server as a child process of the manager.
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
type McpServerSpec struct {
	// ServerName qualifies the server's tools as mcp__<serverName>__<tool>.
	// It defaults to metadata.name, which must then match the same pattern.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]{1,32}$`
	ServerName string `json:"serverName,omitempty"`

	// Transport selects stdio or streamable-http; exactly the matching
	// block below must be set.
	Transport Transport `json:"transport"`

	// Stdio runs the server as a child process. Required iff transport is stdio.
	// +optional
	Stdio *StdioTransport `json:"stdio,omitempty"`

	// StreamableHTTP connects to a remote endpoint. Required iff transport
	// is streamable-http.
	// +optional
	StreamableHTTP *StreamableHTTPTransport `json:"streamableHttp,omitempty"`

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
}

// StdioTransport runs an MCP server as a child process speaking JSON-RPC on
// its stdin and stdout.
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

	// Env is added to the child's scrubbed environment. Each entry sets
	// value, or valueFrom.secretKeyRef or valueFrom.configMapKeyRef in the
	// resource's namespace; other sources are refused.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || !has(e.value) || e.value == '')",message="spec.stdio.env: an entry sets value or valueFrom, not both"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || (has(e.valueFrom.secretKeyRef) ? !has(e.valueFrom.configMapKeyRef) : has(e.valueFrom.configMapKeyRef)))",message="spec.stdio.env: valueFrom sets exactly one of secretKeyRef or configMapKeyRef"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || (!has(e.valueFrom.fieldRef) && !has(e.valueFrom.resourceFieldRef) && !has(e.valueFrom.fileKeyRef)))",message="spec.stdio.env: valueFrom supports only secretKeyRef and configMapKeyRef"
	// +kubebuilder:validation:XValidation:rule="self.all(e, size(e.name) > 0)",message="spec.stdio.env: a name must not be empty"
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Cwd is the child's working directory; empty means the manager's.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Cwd string `json:"cwd,omitempty"`
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
// +kubebuilder:validation:XValidation:rule="has(self.spec.serverName) || self.metadata.name.matches('^[A-Za-z0-9_-]{1,32}$')",message="spec.serverName is required when metadata.name does not match ^[A-Za-z0-9_-]{1,32}$"
type McpServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec McpServerSpec `json:"spec"`
	// +optional
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
