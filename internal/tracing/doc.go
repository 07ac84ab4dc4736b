// Package tracing owns the operator's OpenTelemetry tracing: the tracer
// provider the manager builds from the standard OTEL_* environment
// variables (setup.go), the Tracer handle instrumented code holds and its
// spans, which gather their attributes until they end and hand them to the
// SDK at once (tracer.go), the attribute keys spans carry (attributes.go),
// and W3C trace-context propagation in HTTP headers and in an MCP
// request's params._meta (propagate.go).
//
// Tracing is off unless the environment asks for an exporter. Off, a
// Tracer is its zero value: Start returns the caller's context and a
// non-recording span without allocating, nothing is extracted from or
// injected into requests, and no exporter goroutine runs.
//
// Spans never carry a secret, a header value, a tool's arguments or its
// result; see docs/design.md, "Tracing".
package tracing
