// Package controller owns the McpServer reconciler: it resolves each
// resource's spec, runs one connection supervisor per resource, and writes
// status from the supervisor's snapshots. The RBAC the manager needs is
// declared here, next to the code that uses it.
//
// Supervisors (supervisors.go) is the registry of running supervisors,
// keyed by resource, in the manner of Cluster API's clustercache: it
// starts, swaps and disposes them, never writes to the apiserver, and feeds
// their change signals back to the reconciler through a source.Channel. A
// supervisor that is replaced or deleted stays registered until its last
// server process has closed, even past its close barrier, so that a hot
// swap or a re-created resource never runs two servers at once; status
// says CloseTimeout meanwhile.
//
// CacheOptions (cache.go) shapes the manager's cache: only the Pod
// runtime's own Deployments and Pods, and every object stripped of
// managedFields and of the annotations the manager does not read.
// A Pod-runtime server's Deployment has 0 replicas exactly while its
// supervisor is Sleeping (spec.idle), and 1 otherwise: the supervisor never
// writes to the apiserver, it signals, and the reconcile that follows
// renders the replicas (see docs/design.md, "Idle servers").
package controller

// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcpbridge.dev,resources=mcpservers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
