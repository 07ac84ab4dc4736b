package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const DefaultServiceName = "mcp-bridge"

// Protocols of OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
)

// exportConfig is what the environment asks for: no export (Protocol
// empty), or OTLP over Protocol. The exporters read the rest themselves
// (endpoint, headers, TLS, timeout, compression).
type exportConfig struct {
	Protocol string
}

// configFromEnv decides from the standard variables whether and how spans
// are exported. Tracing is on when OTEL_TRACES_EXPORTER is otlp, or when
// it is unset and an OTLP endpoint is configured: a manager started without
// any of them must not try to reach a collector on localhost. Anything this
// manager cannot do is an error rather than silently no traces.
func configFromEnv(getenv func(string) string) (exportConfig, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return exportConfig{}, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return exportConfig{}, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return exportConfig{}, nil
		}
	case "otlp":
	default:
		return exportConfig{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q is not supported: use otlp (or none)", exporter)
	}
	protocol := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if protocol == "" {
		protocol, name = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch protocol {
	case "", protocolHTTP:
		return exportConfig{Protocol: protocolHTTP}, nil
	case protocolGRPC:
		return exportConfig{Protocol: protocolGRPC}, nil
	default:
		return exportConfig{}, fmt.Errorf("%s=%q is not supported: use %s or %s", name, protocol, protocolHTTP, protocolGRPC)
	}
}

// Setup builds the manager's tracer provider from the environment: an SDK
// provider that batches spans to an OTLP exporter when the OTEL_* variables
// ask for one, a no-op provider otherwise. shutdown flushes and stops the
// exporter; it is a no-op when tracing is off. OpenTelemetry's own errors
// (a collector that cannot be reached) are logged to log.
// See docs/design.md, "Tracing".
func Setup(ctx context.Context, log logr.Logger) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	cfg, err := configFromEnv(os.Getenv)
	if err != nil || cfg.Protocol == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, err
	}
	otel.SetLogger(log)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Error(err, "OpenTelemetry") }))
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: the resource of OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	exp, err := newExporter(ctx, cfg.Protocol)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: the OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (parent-based, always on by
	// default) and the batching from OTEL_BSP_*.
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(spanLimits(sdktrace.NewSpanLimits())))
	log.Info("tracing enabled", "protocol", cfg.Protocol, "serviceName", serviceName(res))
	return sdk, sdk.Shutdown, nil
}

// The operator's span limits (docs/design.md, "Budgets" and "Limits"): no span of the operator
// carries more than about 16 attributes, a few links and no events, and the
// gateway cuts what agents choose to 128 bytes; these bound what a span
// could hold if a step forgot to. See docs/design.md, "Limits".
const (
	maxAttributeValueLength = 1024
	maxSpanAttributes       = 64
	maxSpanEvents           = 32
	maxSpanLinks            = 8
	maxAttributesPerItem    = 16 // per event and per link
)

// spanLimits tightens env (OTEL_SPAN_*_LIMIT and
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, read by sdktrace.NewSpanLimits) to the
// operator's limits: the environment may lower a limit, never raise it.
func spanLimits(env sdktrace.SpanLimits) sdktrace.SpanLimits {
	l := env
	l.AttributeValueLengthLimit = tighter(env.AttributeValueLengthLimit, maxAttributeValueLength)
	l.AttributeCountLimit = tighter(env.AttributeCountLimit, maxSpanAttributes)
	l.EventCountLimit = tighter(env.EventCountLimit, maxSpanEvents)
	l.LinkCountLimit = tighter(env.LinkCountLimit, maxSpanLinks)
	l.AttributePerEventCountLimit = tighter(env.AttributePerEventCountLimit, maxAttributesPerItem)
	l.AttributePerLinkCountLimit = tighter(env.AttributePerLinkCountLimit, maxAttributesPerItem)
	return l
}

// tighter is the smaller of two limits where a negative one is no limit.
func tighter(env, ours int) int {
	if env < 0 {
		return ours
	}
	return min(env, ours)
}

func newExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	if protocol == protocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}
