// Package controller owns the McpServer reconciler: it resolves each
// resource's spec, runs one connection supervisor per resource, and writes
// status from the supervisor's snapshots. The RBAC the manager needs is
// declared here, next to the code that uses it.
package controller

// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
