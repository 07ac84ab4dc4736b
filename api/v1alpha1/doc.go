// Package v1alpha1 holds the mcpbridge.dev/v1alpha1 API: the McpServer
// resource, its spec (what to connect to and how to keep the connection
// alive), its status (what the connection supervisor observed), and the
// names of its conditions, reasons and annotations.
//
// +kubebuilder:object:generate=true
// +groupName=mcpbridge.dev
package v1alpha1
