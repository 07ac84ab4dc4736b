// Package policy owns the second layer of McpServer validation: one explicit
// resolve step from an McpServerSpec (plus the Secret and ConfigMap values it
// references) to the immutable Policy a connection supervisor runs. It
// re-checks every rule the CRD enforces, because a spec can reach the
// controller without the apiserver's checks, and names the field path of
// every error. Policy values may hold secrets: they redact themselves when
// printed or logged.
package policy
