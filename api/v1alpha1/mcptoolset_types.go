package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// McpToolSet carries one McpServer's published tools from the replica that
// holds its connection to every replica's gateway, and says which replica
// holds it. The manager writes it, named and owned by its McpServer; nobody
// else should. See docs/design.md, "Replicas and ownership".
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverName`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.spec.holder`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.spec.toolCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type McpToolSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec McpToolSetSpec `json:"spec"`
}

// McpToolSetSpec is what the holder of an McpServer's connection publishes.
type McpToolSetSpec struct {
	// ServerName is the McpServer's effective serverName, the prefix of its
	// tools' public names.
	// +required
	ServerName string `json:"serverName"`
	// Holder is the replica that holds the server's connection and answers
	// its calls; empty while nobody does (a stdio server between two
	// owners).
	// +optional
	Holder string `json:"holder,omitempty"`
	// ConnectionTimeoutMs is how long a call waits for a new holder while
	// the server is handed over.
	// +optional
	ConnectionTimeoutMs int64 `json:"connectionTimeoutMs,omitempty"`
	// ToolCount is the number of tools in Tools.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`
	// Digest is the SHA-256 of the uncompressed tool list; a holder whose
	// tools did not change does not write.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Tools is the gzip of the JSON array of the server's tools as it
	// listed them (name, description, schemas), after spec.tools.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Tools []byte `json:"tools,omitempty"`
}

// McpToolSetList is a list of McpToolSet.
//
// +kubebuilder:object:root=true
type McpToolSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []McpToolSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&McpToolSet{}, &McpToolSetList{})
}
