package tracing

import (
	"context"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The operator's own attributes, for what OpenTelemetry's semantic
// conventions have no key. The others come from semconv (mcp.*, gen_ai.*,
// error.type, network.*, server.*). See docs/design.md, "Tracing".
const (
	// Namespace is the namespace of the McpServer, or of the gateway
	// endpoint an agent called.
	Namespace = attribute.Key("mcpbridge.namespace")
	// McpServer is the name of the McpServer resource.
	McpServer = attribute.Key("mcpbridge.mcpserver")
	// ServerName is the McpServer's serverName, the middle of its public
	// tool names.
	ServerName = attribute.Key("mcpbridge.server_name")
	// Generation is the connection generation a span ran on.
	Generation = attribute.Key("mcpbridge.generation")
	// Outcome is how the operation ended, in the words of the metrics:
	// success, tool_error, error or unavailable for calls; success or
	// error for connects; success, conflict (the registry refused the set)
	// or error for syncs.
	Outcome = attribute.Key("mcpbridge.outcome")
	// Stage is where a connect or sync failed, as status lastError.stage
	// says it (transport-start, initialize, tools-list page N, ...).
	Stage = attribute.Key("mcpbridge.stage")
	// ToolsFetched and ToolsPublished count a sync's tools: all that the
	// server listed, and what the registry holds of the server afterwards.
	ToolsFetched   = attribute.Key("mcpbridge.tools.fetched")
	ToolsPublished = attribute.Key("mcpbridge.tools.published")
	// SyncTrigger is why tools were synced: connect or list_changed.
	SyncTrigger = attribute.Key("mcpbridge.sync.trigger")
)

// Values of Outcome.
const (
	OutcomeSuccess     = "success"
	OutcomeToolError   = "tool_error"
	OutcomeError       = "error"
	OutcomeUnavailable = "unavailable"
	OutcomeConflict    = "conflict"
)

// ErrorTypeOther is error.type's value for an error of no known class.
const ErrorTypeOther = "_OTHER"

// ErrorType classifies err for error.type, with low cardinality: the
// JSON-RPC code of an error the peer sent, timeout, cancelled, or _OTHER.
// Never the message: a server's message may quote the arguments.
func ErrorType(err error) string {
	var wire *jsonrpc.Error
	switch {
	case errors.As(err, &wire):
		return strconv.FormatInt(wire.Code, 10)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return ErrorTypeOther
	}
}

// Fail marks span failed with errType (error.type) and a status
// description, which must be safe to show: a message the operator wrote,
// never one that could carry arguments, results or secrets.
func Fail(span trace.Span, errType, description string) {
	SetAttributes(span, semconv.ErrorTypeKey.String(errType))
	span.SetStatus(codes.Error, description)
}
