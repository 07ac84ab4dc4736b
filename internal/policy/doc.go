// Package policy owns the second layer of McpServer validation: one explicit
// resolve step from an McpServerSpec (plus the Secret and ConfigMap values it
// references) to the immutable Policy a connection supervisor runs. It
// re-checks every rule the CRD enforces, because a spec can reach the
// controller without the apiserver's checks, and names the field path of
// every error. For a stdio server it also chooses the runtime (Local, a child
// of the manager, or Pod, its own Pod) from the spec and the administrator's
// RuntimeConfig, and checks the Pod-only fields where that choice makes them
// matter. Policy values may hold secrets: they redact themselves when
// printed or logged.
package policy
