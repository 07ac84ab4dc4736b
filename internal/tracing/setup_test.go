package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otelEnv clears every variable Setup or the exporters read, then sets env.
func otelEnv(t *testing.T, env map[string]string) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// logLines is a logger that keeps what it writes.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// collector is what an OTLP receiver got: the requests and their headers.
type collector struct {
	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	headers []string // the authorization header of each request
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest, auth string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
	c.headers = append(c.headers, auth)
}

// spans are the names of the received spans, with their resource's
// service.name and deployment.environment.name.
func (c *collector) spans() (names []string, resources []string, auth []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reqs {
		for _, rs := range r.ResourceSpans {
			var res []string
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" || kv.Key == "deployment.environment.name" {
					res = append(res, kv.Key+"="+kv.Value.GetStringValue())
				}
			}
			resources = append(resources, strings.Join(res, ","))
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	return names, resources, append([]string(nil), c.headers...)
}

func httpCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		c.add(req, r.Header.Get("Authorization"))
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g grpcTraces) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	g.c.add(req, strings.Join(md.Get("authorization"), ","))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func grpcCollector(t *testing.T) (*collector, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcTraces{c: c})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c, "http://" + ln.Addr().String()
}

// TestSetupExports: with an OTLP endpoint in the environment, spans reach
// the collector over either protocol, with the resource the environment
// names, and the exporter's headers (often a key) never reach the log.
func TestSetupExports(t *testing.T) {
	for _, protocol := range []string{protocolHTTP, protocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			g := NewWithT(t)
			start := httpCollector
			if protocol == protocolGRPC {
				start = grpcCollector
			}
			c, endpoint := start(t)
			otelEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
				"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s3cr3t-collector-key",
				"OTEL_SERVICE_NAME":          "bridge-under-test", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
			})
			logs := &logLines{}
			tp, shutdown, err := Setup(context.Background(), funcr.New(logs.add, funcr.Options{Verbosity: 10}))
			g.Expect(err).NotTo(HaveOccurred())
			tr := New(tp)
			g.Expect(tr.On()).To(BeTrue())
			_, span := tr.Start(context.Background(), "op", trace.SpanKindInternal)
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			g.Expect(shutdown(ctx)).To(Succeed(), "shutdown flushes the batch")

			names, resources, auth := c.spans()
			g.Expect(names).To(Equal([]string{"op"}))
			g.Expect(resources).To(Equal([]string{"deployment.environment.name=test,service.name=bridge-under-test"}))
			g.Expect(auth).To(Equal([]string{"Bearer s3cr3t-collector-key"}), "the exporter sends its headers")
			g.Expect(logs.String()).To(ContainSubstring("tracing enabled"))
			g.Expect(logs.String()).NotTo(ContainSubstring("s3cr3t"))
		})
	}
}

func TestSetupDefaultServiceName(t *testing.T) {
	g := NewWithT(t)
	c, endpoint := httpCollector(t)
	otelEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces"})
	tp, shutdown, err := Setup(context.Background(), funcr.New(func(string, string) {}, funcr.Options{}))
	g.Expect(err).NotTo(HaveOccurred())
	_, span := New(tp).Start(context.Background(), "op", trace.SpanKindInternal)
	span.End()
	g.Expect(shutdown(context.Background())).To(Succeed())
	_, resources, _ := c.spans()
	g.Expect(resources).To(Equal([]string{"service.name=" + DefaultServiceName}))
}

// TestSetupOff: without the variables, the provider is a no-op, no
// goroutine is started, and shutdown does nothing.
func TestSetupOff(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"nothing set": nil,
		"none":        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		"disabled":    {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			otelEnv(t, env)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			tp, shutdown, err := Setup(context.Background(), funcr.New(func(string, string) {}, funcr.Options{}))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tp).To(BeAssignableToTypeOf(noop.TracerProvider{}))
			g.Expect(New(tp).On()).To(BeFalse())
			g.Expect(shutdown(context.Background())).To(Succeed())
		})
	}
}

func TestSetupRefusesWhatItCannotDo(t *testing.T) {
	g := NewWithT(t)
	otelEnv(t, map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"})
	_, _, err := Setup(context.Background(), funcr.New(func(string, string) {}, funcr.Options{}))
	g.Expect(err).To(MatchError(ContainSubstring(`OTEL_TRACES_EXPORTER="jaeger" is not supported`)))
	otelEnv(t, map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "broken"})
	_, _, err = Setup(context.Background(), funcr.New(func(string, string) {}, funcr.Options{}))
	g.Expect(err).To(MatchError(ContainSubstring("OTEL_RESOURCE_ATTRIBUTES")))
}

func TestSpanLimitsTightenTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env, want int
	}{
		{"unlimited in the environment", -1, 64},
		{"the SDK's default", 128, 64},
		{"lowered in the environment", 10, 10},
		{"zero in the environment", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tighter(tc.env, 64); got != tc.want {
				t.Errorf("tighter(%d, 64) = %d, want %d", tc.env, got, tc.want)
			}
		})
	}
}

// TestSetupLimitsSpans: the exported span of a step that set a huge value
// and too many attributes carries neither.
func TestSetupLimitsSpans(t *testing.T) {
	g := NewWithT(t)
	c, endpoint := httpCollector(t)
	otelEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
	tp, shutdown, err := Setup(context.Background(), funcr.New(func(string, string) {}, funcr.Options{}))
	g.Expect(err).NotTo(HaveOccurred())
	_, span := New(tp).Start(context.Background(), "op", trace.SpanKindInternal,
		attribute.String("huge", strings.Repeat("x", 4<<20)))
	for i := range 200 {
		span.SetAttributes(attribute.Int("n"+strconv.Itoa(i), i))
	}
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.Expect(shutdown(ctx)).To(Succeed())

	c.mu.Lock()
	defer c.mu.Unlock()
	g.Expect(c.reqs).To(HaveLen(1))
	got := c.reqs[0].ResourceSpans[0].ScopeSpans[0].Spans[0]
	g.Expect(got.Attributes).To(HaveLen(maxSpanAttributes))
	g.Expect(got.DroppedAttributesCount).To(BeNumerically("==", 201-maxSpanAttributes))
	g.Expect(got.Attributes[0].Key).To(Equal("huge"))
	g.Expect(got.Attributes[0].Value.GetStringValue()).To(HaveLen(maxAttributeValueLength))
}
