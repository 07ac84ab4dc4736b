package api_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// mutation changes a valid McpServer into the case under test.
type mutation func(*v1alpha1.McpServer)

// stdioServer is a valid stdio McpServer with the mutations applied.
func stdioServer(muts ...mutation) *v1alpha1.McpServer {
	s := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Name: "fixture"},
		Spec: v1alpha1.McpServerSpec{
			Transport: v1alpha1.TransportStdio,
			Stdio: &v1alpha1.StdioTransport{
				Command: "bin/mcp-fixture",
				Args:    []string{"--tools=5"},
				Env:     []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}},
			},
		},
	}
	for _, m := range muts {
		m(s)
	}
	return s
}

// httpServer is a valid streamable-http McpServer with the mutations applied.
func httpServer(muts ...mutation) *v1alpha1.McpServer {
	s := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Name: "web-tools"},
		Spec: v1alpha1.McpServerSpec{
			ServerName: "web",
			Transport:  v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{
				URL:     "http://tools.agents.svc:3000/mcp",
				Headers: []v1alpha1.HTTPHeader{{Name: "X-Team", Value: ptr.To("agents")}},
			},
		},
	}
	for _, m := range muts {
		m(s)
	}
	return s
}

// manifest is a full McpServer named "invalid" with the given spec, written
// as (flow-style) YAML: for values the Go types cannot hold.
func manifest(spec string) client.Object {
	return fromYAML("apiVersion: mcpbridge.dev/v1alpha1\nkind: McpServer\nmetadata: {name: invalid}\nspec: " + spec + "\n")
}

func env(vars ...corev1.EnvVar) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Stdio.Env = vars }
}

func headers(hs ...v1alpha1.HTTPHeader) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.StreamableHTTP.Headers = hs }
}

func url(u string) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.StreamableHTTP.URL = u }
}

func reconnect(r v1alpha1.ReconnectPolicy) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Reconnect = &r }
}

func suspendAfter(ms int32) mutation {
	return func(s *v1alpha1.McpServer) { s.Spec.Idle = &v1alpha1.IdlePolicy{SuspendAfterMs: ptr.To(ms)} }
}

func named(name string) mutation {
	return func(s *v1alpha1.McpServer) { s.Name = name }
}

func secretRef(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func configMapRef(name, key string) *corev1.ConfigMapKeySelector {
	return &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// expectRefused creates obj in ns with a server-side dry run first (the path
// `kubectl apply --dry-run=server` takes), then for real, and expects both
// refused at fieldPath: both go through defaulting, the schema and the CEL
// rules.
func expectRefused(ctx SpecContext, ns string, obj client.Object, fieldPath string) {
	GinkgoHelper()
	dry := obj.DeepCopyObject().(client.Object)
	dry.SetNamespace(ns)
	expectInvalid(k8sClient.Create(ctx, dry, client.DryRunAll), fieldPath)

	created := obj.DeepCopyObject().(client.Object)
	created.SetNamespace(ns)
	expectInvalid(k8sClient.Create(ctx, created), fieldPath)
}

var _ = Describe("Invalid McpServer manifests", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	DescribeTable("are refused by the apiserver with the field named",
		func(ctx SpecContext, obj client.Object, fieldPath string) {
			expectRefused(ctx, ns, obj, fieldPath)
		},

		// The transport discriminator (four CEL rules on spec).
		Entry("transport stdio with a streamableHttp block as well",
			stdioServer(func(s *v1alpha1.McpServer) {
				s.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: "http://tools:3000/mcp"}
			}), "spec.streamableHttp"),
		Entry("transport streamable-http with a stdio block as well",
			httpServer(func(s *v1alpha1.McpServer) {
				s.Spec.Stdio = &v1alpha1.StdioTransport{Command: "npx"}
			}), "spec.stdio"),
		Entry("transport stdio with only a streamableHttp block",
			httpServer(func(s *v1alpha1.McpServer) { s.Spec.Transport = v1alpha1.TransportStdio }),
			"spec.stdio"),
		Entry("transport streamable-http with only a stdio block",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Transport = v1alpha1.TransportStreamableHTTP }),
			"spec.streamableHttp"),
		Entry("transport stdio without a stdio block",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio = nil }), "spec.stdio"),
		Entry("transport streamable-http without a streamableHttp block",
			httpServer(func(s *v1alpha1.McpServer) { s.Spec.StreamableHTTP = nil }), "spec.streamableHttp"),

		// initialDelayMs <= maxDelayMs (CEL on spec.reconnect, after defaulting).
		Entry("reconnect.initialDelayMs above reconnect.maxDelayMs",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](5000), MaxDelayMs: ptr.To[int32](1000)})),
			"spec.reconnect.initialDelayMs"),
		Entry("only reconnect.initialDelayMs set, above the default maxDelayMs of 30000",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](30001)})),
			"spec.reconnect.initialDelayMs"),
		Entry("only reconnect.maxDelayMs set, below the default initialDelayMs of 500",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{MaxDelayMs: ptr.To[int32](499)})),
			"spec.reconnect.initialDelayMs"),

		// serverName defaults to metadata.name only when that is a valid serverName
		// (CEL on the object).
		Entry("no serverName and a metadata.name with a dot",
			stdioServer(named("my.server")), "spec.serverName"),
		Entry("no serverName and a metadata.name of 33 characters",
			stdioServer(named(strings.Repeat("a", 33))), "spec.serverName"),

		// spec.stdio.env (CEL on the list and the list-map key).
		Entry("env entry with value and valueFrom",
			stdioServer(env(corev1.EnvVar{Name: "TOKEN", Value: "literal", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("s", "token")}})),
			"spec.stdio.env"),
		Entry("env entry with both secretKeyRef and configMapKeyRef",
			stdioServer(env(corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("s", "token"), ConfigMapKeyRef: configMapRef("c", "token")}})),
			"spec.stdio.env"),
		Entry("env entry with valueFrom.fieldRef",
			stdioServer(env(corev1.EnvVar{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})),
			"spec.stdio.env"),
		Entry("env entry with valueFrom.resourceFieldRef",
			stdioServer(env(corev1.EnvVar{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1")}}})),
			"spec.stdio.env"),
		Entry("env entry with valueFrom.fileKeyRef",
			stdioServer(env(corev1.EnvVar{Name: "FROM_FILE", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "v", Path: "env", Key: "K"}}})),
			"spec.stdio.env"),
		Entry("env entry with valueFrom.secretKeyRef and valueFrom.fieldRef",
			stdioServer(env(corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("s", "token"), FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})),
			"spec.stdio.env"),
		Entry("env entry with an empty valueFrom",
			stdioServer(env(corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{}})),
			"spec.stdio.env"),
		// A name with '=' is refused by the Go resolve step only: a CEL
		// string check on corev1.EnvVar's unbounded name exceeds the cost
		// budget at 256 entries.
		Entry("env name empty",
			stdioServer(env(corev1.EnvVar{Name: "", Value: "c"})), "spec.stdio.env"),
		Entry("env name listed twice",
			stdioServer(env(corev1.EnvVar{Name: "A", Value: "1"}, corev1.EnvVar{Name: "A", Value: "2"})),
			"spec.stdio.env[1]"),

		// spec.streamableHttp.url (CEL isURL/scheme/host).
		Entry("url with scheme ftp",
			httpServer(url("ftp://tools.agents.svc/mcp")), "spec.streamableHttp.url"),
		Entry("relative url",
			httpServer(url("/mcp")), "spec.streamableHttp.url"),
		Entry("url without a host",
			httpServer(url("http:///mcp")), "spec.streamableHttp.url"),
		Entry("url without a host, only a port",
			httpServer(url("http://:3000/mcp")), "spec.streamableHttp.url"),
		Entry("url that is not a URL",
			httpServer(url("not a url")), "spec.streamableHttp.url"),
		Entry("url without a scheme",
			httpServer(url("tools.agents.svc:3000/mcp")), "spec.streamableHttp.url"),
		Entry("empty url",
			httpServer(url("")), "spec.streamableHttp.url"),
		Entry("url of 2049 characters",
			httpServer(url("http://tools/"+strings.Repeat("a", 2049-len("http://tools/")))), "spec.streamableHttp.url"),

		// spec.streamableHttp.headers (pattern, CEL on the list and on each entry).
		Entry("header name with a space",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "X Team", Value: ptr.To("agents")})),
			"spec.streamableHttp.headers[0].name"),
		Entry("header name with a colon",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "X-Team:", Value: ptr.To("agents")})),
			"spec.streamableHttp.headers[0].name"),
		Entry("header names that differ only in case",
			httpServer(headers(
				v1alpha1.HTTPHeader{Name: "Authorization", Value: ptr.To("Bearer a")},
				v1alpha1.HTTPHeader{Name: "authorization", Value: ptr.To("Bearer b")},
			)), "spec.streamableHttp.headers"),
		Entry("header with value and valueFrom",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "Authorization", Value: ptr.To("Bearer a"),
				ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: *secretRef("web-token", "header")}})),
			"spec.streamableHttp.headers[0]"),
		Entry("header with neither value nor valueFrom",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "Authorization"})),
			"spec.streamableHttp.headers[0]"),
		Entry("header value with a newline",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("agents\nX-Injected: yes")})),
			"spec.streamableHttp.headers[0].value"),
		Entry("header value with a carriage return",
			httpServer(headers(v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("agents\rX-Injected: yes")})),
			"spec.streamableHttp.headers[0].value"),
		Entry("header valueFrom without secretKeyRef",
			manifest(`{transport: streamable-http, streamableHttp: {url: "http://tools:3000/mcp", headers: [{name: Authorization, valueFrom: {}}]}}`),
			"spec.streamableHttp.headers[0].valueFrom.secretKeyRef"),

		// Bounds.
		Entry("toolCallTimeoutMs 0",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ToolCallTimeoutMs = ptr.To[int32](0) }),
			"spec.toolCallTimeoutMs"),
		Entry("toolCallTimeoutMs 2147483648",
			manifest(`{transport: stdio, stdio: {command: npx}, toolCallTimeoutMs: 2147483648}`),
			"spec.toolCallTimeoutMs"),
		Entry("connectionTimeoutMs 0",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ConnectionTimeoutMs = ptr.To[int32](0) }),
			"spec.connectionTimeoutMs"),
		Entry("connectionTimeoutMs -1",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ConnectionTimeoutMs = ptr.To[int32](-1) }),
			"spec.connectionTimeoutMs"),
		Entry("connectionTimeoutMs 2147483648",
			manifest(`{transport: stdio, stdio: {command: npx}, connectionTimeoutMs: 2147483648}`),
			"spec.connectionTimeoutMs"),
		Entry("healthCheckIntervalMs -1",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.HealthCheckIntervalMs = ptr.To[int32](-1) }),
			"spec.healthCheckIntervalMs"),
		Entry("healthCheckIntervalMs 2147483648",
			manifest(`{transport: stdio, stdio: {command: npx}, healthCheckIntervalMs: 2147483648}`),
			"spec.healthCheckIntervalMs"),
		Entry("reconnect.initialDelayMs 0",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](0)})),
			"spec.reconnect.initialDelayMs"),
		Entry("reconnect.maxDelayMs 0",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](1), MaxDelayMs: ptr.To[int32](0)})),
			"spec.reconnect.maxDelayMs"),
		Entry("reconnect.maxDelayMs 2147483648",
			manifest(`{transport: stdio, stdio: {command: npx}, reconnect: {maxDelayMs: 2147483648}}`),
			"spec.reconnect.maxDelayMs"),
		Entry("reconnect.maxAttempts 0",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)})),
			"spec.reconnect.maxAttempts"),
		Entry("reconnect.maxAttempts -1",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](-1)})),
			"spec.reconnect.maxAttempts"),
		Entry("stdio.args with 257 items",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio.Args = make([]string, 257) }),
			"spec.stdio.args"),
		Entry("stdio.command of 4097 characters",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio.Command = strings.Repeat("c", 4097) }),
			"spec.stdio.command"),

		// spec.idle.suspendAfterMs: 0 or >= 60000, stdio only (CEL).
		Entry("idle.suspendAfterMs 59999, below the floor",
			stdioServer(suspendAfter(59999)), "spec.idle.suspendAfterMs"),
		Entry("idle.suspendAfterMs 1",
			stdioServer(suspendAfter(1)), "spec.idle.suspendAfterMs"),
		Entry("idle.suspendAfterMs -1",
			stdioServer(suspendAfter(-1)), "spec.idle.suspendAfterMs"),
		Entry("idle.suspendAfterMs 2147483648",
			manifest(`{transport: stdio, stdio: {command: npx}, idle: {suspendAfterMs: 2147483648}}`),
			"spec.idle.suspendAfterMs"),
		Entry("idle.suspendAfterMs on a streamable-http server",
			httpServer(suspendAfter(60000)), "spec.idle.suspendAfterMs"),

		// Wrong types, which the Go types cannot express.
		Entry("a string in a number field (toolCallTimeoutMs)",
			manifest(`{transport: stdio, stdio: {command: npx}, toolCallTimeoutMs: "60000"}`),
			"spec.toolCallTimeoutMs"),
		Entry("a string in a number field (reconnect.maxAttempts)",
			manifest(`{transport: stdio, stdio: {command: npx}, reconnect: {maxAttempts: ten}}`),
			"spec.reconnect.maxAttempts"),
		Entry("a fraction in an integer field (connectionTimeoutMs)",
			manifest(`{transport: stdio, stdio: {command: npx}, connectionTimeoutMs: 1.5}`),
			"spec.connectionTimeoutMs"),
		Entry("a string in a boolean field (failOnStartupError)",
			manifest(`{transport: stdio, stdio: {command: npx}, failOnStartupError: "yes"}`),
			"spec.failOnStartupError"),

		// serverName pattern ^[A-Za-z0-9_-]{1,32}$.
		Entry("serverName with a dot",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ServerName = "my.server" }), "spec.serverName"),
		Entry("serverName of 33 characters",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ServerName = strings.Repeat("s", 33) }), "spec.serverName"),
		Entry("serverName empty",
			manifest(`{serverName: "", transport: stdio, stdio: {command: npx}}`), "spec.serverName"),
		Entry("serverName with a space",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ServerName = "my server" }), "spec.serverName"),

		// The transport enum and required fields.
		Entry("transport grpc",
			manifest(`{transport: grpc, stdio: {command: npx}}`), "spec.transport"),
		Entry("transport missing",
			manifest(`{stdio: {command: npx}}`), "spec.transport"),
		Entry("stdio.command missing",
			manifest(`{transport: stdio, stdio: {args: ["-y", "@modelcontextprotocol/server-everything"]}}`), "spec.stdio.command"),
		Entry("stdio.command empty",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Stdio.Command = "" }), "spec.stdio.command"),
		Entry("streamableHttp.url missing",
			manifest(`{transport: streamable-http, streamableHttp: {headers: [{name: X-Team, value: agents}]}}`), "spec.streamableHttp.url"),
		Entry("spec missing",
			fromYAML("apiVersion: mcpbridge.dev/v1alpha1\nkind: McpServer\nmetadata: {name: invalid}\n"), "spec"),
	)
})

// withDefaults is spec as the apiserver stores it: every default the CRD
// declares filled in where the field is absent.
func withDefaults(spec v1alpha1.McpServerSpec) v1alpha1.McpServerSpec {
	out := *spec.DeepCopy()
	setDefault := func(p **int32, v int32) {
		if *p == nil {
			*p = ptr.To(v)
		}
	}
	setDefault(&out.ToolCallTimeoutMs, 60000)
	setDefault(&out.ConnectionTimeoutMs, 60000)
	setDefault(&out.HealthCheckIntervalMs, 30000)
	if out.FailOnStartupError == nil {
		out.FailOnStartupError = ptr.To(false)
	}
	if out.Reconnect == nil {
		out.Reconnect = &v1alpha1.ReconnectPolicy{}
	}
	if out.Reconnect.Enabled == nil {
		out.Reconnect.Enabled = ptr.To(true)
	}
	setDefault(&out.Reconnect.InitialDelayMs, 500)
	setDefault(&out.Reconnect.MaxDelayMs, 30000)
	setDefault(&out.Reconnect.MaxAttempts, 10)
	return out
}

// createAndGet creates obj in ns and reads it back from the apiserver.
func createAndGet(ctx SpecContext, ns string, obj *v1alpha1.McpServer) *v1alpha1.McpServer {
	GinkgoHelper()
	obj = obj.DeepCopy()
	obj.Namespace = ns
	Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	got := &v1alpha1.McpServer{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
	return got
}

var _ = Describe("Valid McpServer manifests", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	It("come back with every default filled in: minimal stdio", func(ctx SpecContext) {
		minimal := &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Name: "minimal-stdio"},
			Spec: v1alpha1.McpServerSpec{
				Transport: v1alpha1.TransportStdio,
				Stdio:     &v1alpha1.StdioTransport{Command: "npx"},
			},
		}
		got := createAndGet(ctx, ns, minimal)
		Expect(got.Spec).To(Equal(v1alpha1.McpServerSpec{
			Transport:             v1alpha1.TransportStdio,
			Stdio:                 &v1alpha1.StdioTransport{Command: "npx"},
			ToolCallTimeoutMs:     ptr.To[int32](60000),
			ConnectionTimeoutMs:   ptr.To[int32](60000),
			HealthCheckIntervalMs: ptr.To[int32](30000),
			FailOnStartupError:    ptr.To(false),
			Reconnect: &v1alpha1.ReconnectPolicy{
				Enabled:        ptr.To(true),
				InitialDelayMs: ptr.To[int32](500),
				MaxDelayMs:     ptr.To[int32](30000),
				MaxAttempts:    ptr.To[int32](10),
			},
		}))
	})

	It("come back with every default filled in: minimal streamable-http, also on a server-side dry run", func(ctx SpecContext) {
		minimal := fromYAML(`
apiVersion: mcpbridge.dev/v1alpha1
kind: McpServer
metadata: {name: minimal-http}
spec:
  transport: streamable-http
  streamableHttp: {url: "https://tools.example.com/mcp"}
`)
		minimal.SetNamespace(ns)
		dry := minimal.DeepCopy()
		Expect(k8sClient.Create(ctx, dry, client.DryRunAll)).To(Succeed())
		Expect(dry.Object["spec"]).To(Equal(map[string]any{
			"transport":             "streamable-http",
			"streamableHttp":        map[string]any{"url": "https://tools.example.com/mcp"},
			"toolCallTimeoutMs":     int64(60000),
			"connectionTimeoutMs":   int64(60000),
			"healthCheckIntervalMs": int64(30000),
			"failOnStartupError":    false,
			"reconnect": map[string]any{
				"enabled":        true,
				"initialDelayMs": int64(500),
				"maxDelayMs":     int64(30000),
				"maxAttempts":    int64(10),
			},
		}))

		Expect(k8sClient.Create(ctx, minimal)).To(Succeed())
		got := &v1alpha1.McpServer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(minimal), got)).To(Succeed())
		Expect(got.Spec).To(Equal(withDefaults(v1alpha1.McpServerSpec{
			Transport:      v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: "https://tools.example.com/mcp"},
		})))
	})

	DescribeTable("are accepted at the edges and stored as sent, with defaults for what was left out",
		func(ctx SpecContext, obj *v1alpha1.McpServer) {
			got := createAndGet(ctx, ns, obj)
			Expect(got.Spec).To(Equal(withDefaults(obj.Spec)))
		},
		Entry("every bound at its minimum (1, healthCheckIntervalMs 0)",
			stdioServer(func(s *v1alpha1.McpServer) {
				s.Spec.ToolCallTimeoutMs = ptr.To[int32](1)
				s.Spec.ConnectionTimeoutMs = ptr.To[int32](1)
				s.Spec.HealthCheckIntervalMs = ptr.To[int32](0)
				s.Spec.Reconnect = &v1alpha1.ReconnectPolicy{
					InitialDelayMs: ptr.To[int32](1), MaxDelayMs: ptr.To[int32](1), MaxAttempts: ptr.To[int32](1)}
			})),
		Entry("every bound at its maximum (2147483647)",
			stdioServer(func(s *v1alpha1.McpServer) {
				s.Spec.ToolCallTimeoutMs = ptr.To[int32](2147483647)
				s.Spec.ConnectionTimeoutMs = ptr.To[int32](2147483647)
				s.Spec.HealthCheckIntervalMs = ptr.To[int32](2147483647)
				s.Spec.Reconnect = &v1alpha1.ReconnectPolicy{
					InitialDelayMs: ptr.To[int32](2147483647), MaxDelayMs: ptr.To[int32](2147483647), MaxAttempts: ptr.To[int32](2147483647)}
			})),
		Entry("healthCheckIntervalMs 0 stays 0",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.HealthCheckIntervalMs = ptr.To[int32](0) })),
		Entry("idle.suspendAfterMs at its floor of 60000",
			stdioServer(suspendAfter(60000))),
		Entry("idle.suspendAfterMs 0 (never) on a stdio server",
			stdioServer(suspendAfter(0))),
		Entry("idle.suspendAfterMs 0 on a streamable-http server",
			httpServer(suspendAfter(0))),
		Entry("idle.suspendAfterMs at its maximum (2147483647)",
			stdioServer(suspendAfter(2147483647))),
		Entry("initialDelayMs equal to maxDelayMs",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](2000), MaxDelayMs: ptr.To[int32](2000)}))),
		Entry("only maxDelayMs set, equal to the default initialDelayMs",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{MaxDelayMs: ptr.To[int32](500)}))),
		Entry("reconnect disabled, the rest defaulted",
			stdioServer(reconnect(v1alpha1.ReconnectPolicy{Enabled: ptr.To(false)}))),
		Entry("failOnStartupError true",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.FailOnStartupError = ptr.To(true) })),
		Entry("serverName of exactly 32 characters",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ServerName = strings.Repeat("s", 32) })),
		Entry("serverName with every allowed character class",
			stdioServer(func(s *v1alpha1.McpServer) { s.Spec.ServerName = "Git_Hub-2" })),
		Entry("no serverName, metadata.name a valid serverName",
			stdioServer(named("github-tools"))),
		Entry("no serverName, metadata.name of exactly 32 characters",
			stdioServer(named(strings.Repeat("a", 32)))),
		Entry("metadata.name with a dot and a serverName",
			stdioServer(named("my.server"), func(s *v1alpha1.McpServer) { s.Spec.ServerName = "my_server" })),
		Entry("env from a value, a Secret and a ConfigMap",
			stdioServer(env(
				corev1.EnvVar{Name: "LITERAL", Value: "x=y"},
				corev1.EnvVar{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef("github", "token")}},
				corev1.EnvVar{Name: "FROM_CONFIGMAP", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: configMapRef("settings", "level")}},
				corev1.EnvVar{Name: "EMPTY"},
			))),
		Entry("stdio with args, env and cwd at their limits",
			stdioServer(func(s *v1alpha1.McpServer) {
				s.Spec.Stdio.Command = strings.Repeat("c", 4096)
				s.Spec.Stdio.Args = make([]string, 256)
				s.Spec.Stdio.Cwd = "/" + strings.Repeat("d", 4095)
			})),
		Entry("https url with port, path and query, headers from a value and a Secret",
			httpServer(url("https://tools.example.com:8443/v1/mcp?tenant=a"), headers(
				v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("agents")},
				v1alpha1.HTTPHeader{Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: *secretRef("web-token", "header")}},
				v1alpha1.HTTPHeader{Name: "X-Api-Key!#$%&'*+.^_`|~", Value: ptr.To("k")},
			))),
		Entry("http url with an IPv6 loopback host",
			httpServer(url("http://[::1]:3000/mcp"))),
	)
})
