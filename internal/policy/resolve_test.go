package policy_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// ---- spec constructors -----------------------------------------------------

const (
	testURL = "https://tools.example.com/mcp"
	objName = "srv"    // metadata.name used unless a row says otherwise
	testNS  = "agents" // metadata.namespace
)

// allLocal runs every stdio server Local, as the manager did before the Pod
// runtime: the rules that do not depend on the runtime are tested with it.
var allLocal = policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}}

type specMod func(*v1alpha1.McpServerSpec)

// stdioSpec is the smallest valid stdio spec, changed by mods.
func stdioSpec(mods ...specMod) *v1alpha1.McpServerSpec {
	s := &v1alpha1.McpServerSpec{
		Transport: v1alpha1.TransportStdio,
		Stdio:     &v1alpha1.StdioTransport{Command: "mcp-server"},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// httpSpec is the smallest valid streamable-http spec, changed by mods.
func httpSpec(mods ...specMod) *v1alpha1.McpServerSpec {
	s := &v1alpha1.McpServerSpec{
		Transport:      v1alpha1.TransportStreamableHTTP,
		StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: testURL},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func withServerName(n string) specMod { return func(s *v1alpha1.McpServerSpec) { s.ServerName = n } }
func withCommand(c string) specMod    { return func(s *v1alpha1.McpServerSpec) { s.Stdio.Command = c } }
func withArgs(a ...string) specMod    { return func(s *v1alpha1.McpServerSpec) { s.Stdio.Args = a } }
func withCwd(c string) specMod        { return func(s *v1alpha1.McpServerSpec) { s.Stdio.Cwd = c } }
func withURL(u string) specMod        { return func(s *v1alpha1.McpServerSpec) { s.StreamableHTTP.URL = u } }

func withEnv(env ...corev1.EnvVar) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.Stdio.Env = env }
}

func withHeaders(h ...v1alpha1.HTTPHeader) specMod {
	return func(s *v1alpha1.McpServerSpec) { s.StreamableHTTP.Headers = h }
}

func withReconnect(m func(*v1alpha1.ReconnectPolicy)) specMod {
	return func(s *v1alpha1.McpServerSpec) {
		if s.Reconnect == nil {
			s.Reconnect = &v1alpha1.ReconnectPolicy{}
		}
		m(s.Reconnect)
	}
}

func envValue(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func envSecret(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretSel(secret, key)}}
}

func envConfigMap(name, cm, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key,
	}}}
}

// optionalEnv marks the entry's reference optional.
func optionalEnv(e corev1.EnvVar) corev1.EnvVar {
	if s := e.ValueFrom.SecretKeyRef; s != nil {
		s.Optional = ptr.To(true)
	}
	if c := e.ValueFrom.ConfigMapKeyRef; c != nil {
		c.Optional = ptr.To(true)
	}
	return e
}

func secretSel(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func hdrValue(name, value string) v1alpha1.HTTPHeader {
	return v1alpha1.HTTPHeader{Name: name, Value: ptr.To(value)}
}

func hdrSecret(name, secret, key string) v1alpha1.HTTPHeader {
	return v1alpha1.HTTPHeader{Name: name, ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: *secretSel(secret, key)}}
}

func optionalHdr(h v1alpha1.HTTPHeader) v1alpha1.HTTPHeader {
	h.ValueFrom.SecretKeyRef.Optional = ptr.To(true)
	return h
}

func manyEnv(n int) []corev1.EnvVar {
	env := make([]corev1.EnvVar, n)
	for i := range env {
		env[i] = envValue(fmt.Sprintf("VAR_%d", i), "v")
	}
	return env
}

func manyHeaders(n int) []v1alpha1.HTTPHeader {
	h := make([]v1alpha1.HTTPHeader, n)
	for i := range h {
		h[i] = hdrValue(fmt.Sprintf("X-H%d", i), "v")
	}
	return h
}

func manyArgs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = "a"
	}
	return a
}

func secretRef(name, key string) policy.Ref {
	return policy.Ref{Kind: policy.SecretRef, Name: name, Key: key}
}
func cmRef(name, key string) policy.Ref {
	return policy.Ref{Kind: policy.ConfigMapRef, Name: name, Key: key}
}

// urlOfLen is a valid https URL exactly n bytes long.
func urlOfLen(n int) string {
	const prefix = "https://h.example.com/"
	return prefix + strings.Repeat("p", n-len(prefix))
}

// invalidErrs asserts that err is an *InvalidSpecError and returns its list.
func invalidErrs(t *testing.T, err error) field.ErrorList {
	t.Helper()
	var ise *policy.InvalidSpecError
	if !errors.As(err, &ise) {
		t.Fatalf("err = %v (%T), want *policy.InvalidSpecError", err, err)
	}
	if !policy.IsInvalidSpec(err) {
		t.Fatalf("IsInvalidSpec(%v) = false, want true", err)
	}
	if len(ise.Errs) == 0 {
		t.Fatal("InvalidSpecError with an empty ErrorList")
	}
	return ise.Errs
}

// ---- the ms-valued fields, for generated bound rows -----------------------

type msField struct {
	path string
	set  func(*v1alpha1.McpServerSpec, int32)
	get  func(*policy.Policy) time.Duration
	// alsoOnInvalid lists other fields that may legitimately be reported
	// together with an out-of-range value.
	alsoOnInvalid []string
}

var positiveMsFields = []msField{
	{
		path: "spec.toolCallTimeoutMs",
		set:  func(s *v1alpha1.McpServerSpec, v int32) { s.ToolCallTimeoutMs = ptr.To(v) },
		get:  func(p *policy.Policy) time.Duration { return p.ToolCallTimeout },
	},
	{
		path: "spec.connectionTimeoutMs",
		set:  func(s *v1alpha1.McpServerSpec, v int32) { s.ConnectionTimeoutMs = ptr.To(v) },
		get:  func(p *policy.Policy) time.Duration { return p.ConnectionTimeout },
	},
	{
		path: "spec.reconnect.initialDelayMs",
		set: func(s *v1alpha1.McpServerSpec, v int32) {
			// maxDelay at its top so that only the bound itself is tested.
			s.Reconnect = &v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To(v), MaxDelayMs: ptr.To[int32](math.MaxInt32)}
		},
		get: func(p *policy.Policy) time.Duration { return p.Reconnect.InitialDelay },
	},
	{
		path: "spec.reconnect.maxDelayMs",
		set: func(s *v1alpha1.McpServerSpec, v int32) {
			// initialDelay at its bottom so that only the bound itself is tested.
			s.Reconnect = &v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](1), MaxDelayMs: ptr.To(v)}
		},
		get: func(p *policy.Policy) time.Duration { return p.Reconnect.MaxDelay },
		// initialDelayMs (1) > maxDelayMs (<= 0) is also true.
		alsoOnInvalid: []string{"spec.reconnect.initialDelayMs"},
	},
}

// ---- invalid specs ---------------------------------------------------------

type invalidCase struct {
	name   string
	obj    *string // metadata.name; nil means objName
	spec   *v1alpha1.McpServerSpec
	values policy.Values
	// field is the path every error must name (plus also); typ, when set,
	// is the error type expected on it.
	field string
	typ   field.ErrorType
	also  []string
	// secret must not appear in err.Error().
	secret string
}

func invalidSpecCases() []invalidCase {
	cases := []invalidCase{
		// serverName
		{name: "serverName of 33 characters", spec: stdioSpec(withServerName(strings.Repeat("a", 33))),
			field: "spec.serverName", typ: field.ErrorTypeInvalid},
		{name: "serverName with a dot", spec: stdioSpec(withServerName("my.server")),
			field: "spec.serverName", typ: field.ErrorTypeInvalid},
		{name: "serverName with a space", spec: stdioSpec(withServerName("my server")),
			field: "spec.serverName", typ: field.ErrorTypeInvalid},
		{name: "serverName with a non-ASCII letter", spec: stdioSpec(withServerName("serv\u00e9r")),
			field: "spec.serverName", typ: field.ErrorTypeInvalid},
		{name: "serverName unset and metadata.name empty", obj: ptr.To(""), spec: stdioSpec(),
			field: "spec.serverName", typ: field.ErrorTypeRequired},
		{name: "serverName unset and metadata.name with a dot", obj: ptr.To("my.server"), spec: stdioSpec(),
			field: "spec.serverName", typ: field.ErrorTypeRequired},
		{name: "serverName unset and metadata.name of 33 characters", obj: ptr.To(strings.Repeat("a", 33)), spec: stdioSpec(),
			field: "spec.serverName", typ: field.ErrorTypeRequired},
		{name: "serverName invalid even when metadata.name is valid", obj: ptr.To("github"), spec: stdioSpec(withServerName("git hub")),
			field: "spec.serverName", typ: field.ErrorTypeInvalid},

		// transport enum and discriminator
		{name: "transport empty", spec: &v1alpha1.McpServerSpec{},
			field: "spec.transport", typ: field.ErrorTypeNotSupported},
		{name: "transport unknown", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.Transport = "sse" }),
			field: "spec.transport", typ: field.ErrorTypeNotSupported},
		{name: "transport is case-sensitive", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.Transport = "STDIO" }),
			field: "spec.transport", typ: field.ErrorTypeNotSupported},
		{name: "stdio transport without a stdio block", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.Stdio = nil }),
			field: "spec.stdio", typ: field.ErrorTypeRequired},
		{name: "streamable-http transport without a streamableHttp block", spec: httpSpec(func(s *v1alpha1.McpServerSpec) { s.StreamableHTTP = nil }),
			field: "spec.streamableHttp", typ: field.ErrorTypeRequired},
		{name: "stdio transport with a streamableHttp block", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) {
			s.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: testURL}
		}), field: "spec.streamableHttp", typ: field.ErrorTypeForbidden},
		{name: "streamable-http transport with a stdio block", spec: httpSpec(func(s *v1alpha1.McpServerSpec) {
			s.Stdio = &v1alpha1.StdioTransport{Command: "x"}
		}), field: "spec.stdio", typ: field.ErrorTypeForbidden},
		{name: "streamable-http transport with only a stdio block", spec: httpSpec(func(s *v1alpha1.McpServerSpec) {
			s.StreamableHTTP, s.Stdio = nil, &v1alpha1.StdioTransport{Command: "x"}
		}), field: "spec.stdio", also: []string{"spec.streamableHttp"}},

		// healthCheckIntervalMs: 0 allowed, negative refused
		{name: "healthCheckIntervalMs -1", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](-1) }),
			field: "spec.healthCheckIntervalMs", typ: field.ErrorTypeInvalid},
		{name: "healthCheckIntervalMs MinInt32", spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](math.MinInt32) }),
			field: "spec.healthCheckIntervalMs", typ: field.ErrorTypeInvalid},

		// reconnect
		{name: "maxAttempts 0", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.MaxAttempts = ptr.To[int32](0) })),
			field: "spec.reconnect.maxAttempts", typ: field.ErrorTypeInvalid},
		{name: "maxAttempts -1", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.MaxAttempts = ptr.To[int32](-1) })),
			field: "spec.reconnect.maxAttempts", typ: field.ErrorTypeInvalid},
		{name: "initialDelayMs one above maxDelayMs", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.InitialDelayMs, r.MaxDelayMs = ptr.To[int32](1001), ptr.To[int32](1000)
		})), field: "spec.reconnect.initialDelayMs", typ: field.ErrorTypeInvalid},
		{name: "initialDelayMs above the default maxDelayMs when maxDelayMs is unset", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.InitialDelayMs = ptr.To[int32](30001)
		})), field: "spec.reconnect.initialDelayMs", typ: field.ErrorTypeInvalid},
		{name: "maxDelayMs below the default initialDelayMs when initialDelayMs is unset", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.MaxDelayMs = ptr.To[int32](499)
		})), field: "spec.reconnect.initialDelayMs", typ: field.ErrorTypeInvalid},
		{name: "initialDelayMs above maxDelayMs with reconnect disabled", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.Enabled, r.InitialDelayMs, r.MaxDelayMs = ptr.To(false), ptr.To[int32](2), ptr.To[int32](1)
		})), field: "spec.reconnect.initialDelayMs", typ: field.ErrorTypeInvalid},

		// stdio
		{name: "command empty", spec: stdioSpec(withCommand("")),
			field: "spec.stdio.command", typ: field.ErrorTypeRequired},
		{name: "command of 4097 bytes", spec: stdioSpec(withCommand(strings.Repeat("c", 4097))),
			field: "spec.stdio.command", typ: field.ErrorTypeTooLong},
		{name: "257 args", spec: stdioSpec(withArgs(manyArgs(257)...)),
			field: "spec.stdio.args", typ: field.ErrorTypeTooMany},
		{name: "arg of 32769 bytes", spec: stdioSpec(withArgs("ok", strings.Repeat("a", 32769))),
			field: "spec.stdio.args[1]", typ: field.ErrorTypeTooLong},
		{name: "cwd of 4097 bytes", spec: stdioSpec(withCwd(strings.Repeat("d", 4097))),
			field: "spec.stdio.cwd", typ: field.ErrorTypeTooLong},

		// stdio env
		{name: "env sets value and valueFrom",
			spec: stdioSpec(withEnv(func() corev1.EnvVar {
				e := envSecret("TOKEN", "s", "k")
				e.Value = "literal"
				return e
			}())),
			values: policy.Values{secretRef("s", "k"): "v"},
			field:  "spec.stdio.env[0].value", typ: field.ErrorTypeInvalid},
		{name: "env valueFrom with both secretKeyRef and configMapKeyRef",
			spec: stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef:    secretSel("s", "k"),
				ConfigMapKeyRef: envConfigMap("A", "c", "k").ValueFrom.ConfigMapKeyRef,
			}})),
			values: policy.Values{secretRef("s", "k"): "v", cmRef("c", "k"): "v"},
			field:  "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeInvalid},
		{name: "env valueFrom with neither ref",
			spec:  stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{}})),
			field: "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeRequired},
		{name: "env valueFrom.fieldRef",
			spec: stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
			}})),
			field: "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeForbidden},
		{name: "env valueFrom.resourceFieldRef",
			spec: stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"},
			}})),
			field: "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeForbidden},
		{name: "env valueFrom.fileKeyRef",
			spec: stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{
				FileKeyRef: &corev1.FileKeySelector{VolumeName: "v", Path: "p", Key: "k"},
			}})),
			field: "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeForbidden},
		{name: "env valueFrom.fieldRef next to a secretKeyRef",
			spec: stdioSpec(withEnv(corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: secretSel("s", "k"),
				FieldRef:     &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
			}})),
			values: policy.Values{secretRef("s", "k"): "v"},
			field:  "spec.stdio.env[0].valueFrom", typ: field.ErrorTypeForbidden},
		{name: "env name empty", spec: stdioSpec(withEnv(envValue("", "x"))),
			field: "spec.stdio.env[0].name", typ: field.ErrorTypeInvalid},
		{name: "env name with '='", spec: stdioSpec(withEnv(envValue("A=B", "x"))),
			field: "spec.stdio.env[0].name", typ: field.ErrorTypeInvalid},
		{name: "env name duplicated", spec: stdioSpec(withEnv(envValue("A", "1"), envValue("B", "2"), envValue("A", "3"))),
			field: "spec.stdio.env[2].name", typ: field.ErrorTypeDuplicate},
		{name: "257 env entries", spec: stdioSpec(withEnv(manyEnv(257)...)),
			field: "spec.stdio.env", typ: field.ErrorTypeTooMany},
		{name: "env secretKeyRef without a name", spec: stdioSpec(withEnv(envSecret("A", "", "k"))),
			field: "spec.stdio.env[0].valueFrom.secretKeyRef.name", typ: field.ErrorTypeRequired},
		{name: "env configMapKeyRef without a key", spec: stdioSpec(withEnv(envConfigMap("A", "c", ""))),
			field: "spec.stdio.env[0].valueFrom.configMapKeyRef.key", typ: field.ErrorTypeRequired},

		// streamableHttp url
		{name: "url empty", spec: httpSpec(withURL("")), field: "spec.streamableHttp.url"},
		{name: "url with ftp scheme", spec: httpSpec(withURL("ftp://files.example.com/mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url relative", spec: httpSpec(withURL("/mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url without a host", spec: httpSpec(withURL("http:///mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url with a port but no host", spec: httpSpec(withURL("https://:443/mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url without scheme", spec: httpSpec(withURL("tools.example.com/mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url garbage", spec: httpSpec(withURL("::not a url::")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url with a control character", spec: httpSpec(withURL("https://tools.example.com/\x7f")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid},
		{name: "url of 2049 bytes", spec: httpSpec(withURL(urlOfLen(2049))),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeTooLong},
		{name: "invalid url does not echo its password", spec: httpSpec(withURL("ftp://admin:url-pass-s3cr3t@files.example.com/")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid, secret: "url-pass-s3cr3t"},
		{name: "url without host does not echo its password", spec: httpSpec(withURL("http://admin:url-pass-s3cr3t@/mcp")),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeInvalid, secret: "url-pass-s3cr3t"},
		{name: "too long url does not echo its password", spec: httpSpec(withURL("https://admin:url-pass-s3cr3t@h.example.com/" + strings.Repeat("p", 2048))),
			field: "spec.streamableHttp.url", typ: field.ErrorTypeTooLong, secret: "url-pass-s3cr3t"},

		// streamableHttp headers
		{name: "header name with a space", spec: httpSpec(withHeaders(hdrValue("X Api", "v"))),
			field: "spec.streamableHttp.headers[0].name", typ: field.ErrorTypeInvalid},
		{name: "header name with a colon", spec: httpSpec(withHeaders(hdrValue("X-Api:", "v"))),
			field: "spec.streamableHttp.headers[0].name", typ: field.ErrorTypeInvalid},
		{name: "header name empty", spec: httpSpec(withHeaders(hdrValue("", "v"))),
			field: "spec.streamableHttp.headers[0].name", typ: field.ErrorTypeInvalid},
		{name: "header name non-ASCII", spec: httpSpec(withHeaders(hdrValue("X-Cl\u00e9", "v"))),
			field: "spec.streamableHttp.headers[0].name", typ: field.ErrorTypeInvalid},
		{name: "header name of 257 bytes", spec: httpSpec(withHeaders(hdrValue(strings.Repeat("x", 257), "v"))),
			field: "spec.streamableHttp.headers[0].name", typ: field.ErrorTypeTooLong},
		{name: "header names duplicated case-insensitively",
			spec:  httpSpec(withHeaders(hdrValue("Authorization", "a"), hdrValue("X-Other", "b"), hdrValue("authorization", "c"))),
			field: "spec.streamableHttp.headers[2].name", typ: field.ErrorTypeDuplicate},
		{name: "header names duplicated case-insensitively, capitals second",
			spec:  httpSpec(withHeaders(hdrValue("x-api-key", "a"), hdrValue("X-API-KEY", "b"))),
			field: "spec.streamableHttp.headers[1].name", typ: field.ErrorTypeDuplicate},
		{name: "header names duplicated exactly",
			spec:  httpSpec(withHeaders(hdrValue("X-Api-Key", "a"), hdrValue("X-Api-Key", "b"))),
			field: "spec.streamableHttp.headers[1].name", typ: field.ErrorTypeDuplicate},
		{name: "header sets value and valueFrom",
			spec: httpSpec(withHeaders(func() v1alpha1.HTTPHeader {
				h := hdrSecret("Authorization", "s", "k")
				h.Value = ptr.To("literal")
				return h
			}())),
			values: policy.Values{secretRef("s", "k"): "v"},
			field:  "spec.streamableHttp.headers[0]", typ: field.ErrorTypeInvalid},
		{name: "header sets neither value nor valueFrom", spec: httpSpec(withHeaders(v1alpha1.HTTPHeader{Name: "X-Api-Key"})),
			field: "spec.streamableHttp.headers[0]", typ: field.ErrorTypeInvalid},
		{name: "header literal value with \\n", spec: httpSpec(withHeaders(hdrValue("X-Api-Key", "lit-s3cr3t\nX-Evil: 1"))),
			field: "spec.streamableHttp.headers[0].value", typ: field.ErrorTypeInvalid, secret: "lit-s3cr3t"},
		{name: "header literal value with \\r", spec: httpSpec(withHeaders(hdrValue("X-Api-Key", "lit-s3cr3t\r"))),
			field: "spec.streamableHttp.headers[0].value", typ: field.ErrorTypeInvalid, secret: "lit-s3cr3t"},
		{name: "header Secret value with a trailing newline",
			spec:   httpSpec(withHeaders(hdrSecret("Authorization", "web-token", "header"))),
			values: policy.Values{secretRef("web-token", "header"): "Bearer tok-s3cr3t\n"},
			field:  "spec.streamableHttp.headers[0].valueFrom.secretKeyRef", typ: field.ErrorTypeInvalid, secret: "tok-s3cr3t"},
		{name: "header Secret value with a carriage return",
			spec:   httpSpec(withHeaders(hdrSecret("Authorization", "web-token", "header"))),
			values: policy.Values{secretRef("web-token", "header"): "Bearer tok-s3cr3t\r"},
			field:  "spec.streamableHttp.headers[0].valueFrom.secretKeyRef", typ: field.ErrorTypeInvalid, secret: "tok-s3cr3t"},
		{name: "header literal value of 8193 bytes", spec: httpSpec(withHeaders(hdrValue("X-Api-Key", "lit-s3cr3t"+strings.Repeat("v", 8193-10)))),
			field: "spec.streamableHttp.headers[0].value", typ: field.ErrorTypeTooLong, secret: "lit-s3cr3t"},
		{name: "65 headers", spec: httpSpec(withHeaders(manyHeaders(65)...)),
			field: "spec.streamableHttp.headers", typ: field.ErrorTypeTooMany},
		{name: "header secretKeyRef without a key", spec: httpSpec(withHeaders(hdrSecret("Authorization", "s", ""))),
			field: "spec.streamableHttp.headers[0].valueFrom.secretKeyRef.key", typ: field.ErrorTypeRequired},
	}

	// Every positive *Ms field: 0, -1 and MinInt32 are refused.
	for _, f := range positiveMsFields {
		for _, v := range []int32{0, -1, math.MinInt32} {
			cases = append(cases, invalidCase{
				name:  fmt.Sprintf("%s %d", strings.TrimPrefix(f.path, "spec."), v),
				spec:  stdioSpec(func(s *v1alpha1.McpServerSpec) { f.set(s, v) }),
				field: f.path, typ: field.ErrorTypeInvalid, also: f.alsoOnInvalid,
			})
		}
	}
	// spec.tools
	for _, which := range []string{"include", "exclude"} {
		set := func(globs ...v1alpha1.ToolGlob) specMod {
			return func(s *v1alpha1.McpServerSpec) {
				s.Tools = &v1alpha1.ToolFilter{}
				if which == "include" {
					s.Tools.Include = globs
				} else {
					s.Tools.Exclude = globs
				}
			}
		}
		path := "spec.tools." + which
		many := make([]v1alpha1.ToolGlob, 65)
		for i := range many {
			many[i] = "t*"
		}
		cases = append(cases,
			invalidCase{name: which + " with an unclosed class", spec: httpSpec(set("get_*", "[abc")),
				field: path + "[1]", typ: field.ErrorTypeInvalid},
			invalidCase{name: which + " with an empty class", spec: httpSpec(set("[]")),
				field: path + "[0]", typ: field.ErrorTypeInvalid},
			invalidCase{name: which + " ending in a backslash", spec: stdioSpec(set(`delete_\`)),
				field: path + "[0]", typ: field.ErrorTypeInvalid},
			invalidCase{name: which + " with a bad range", spec: stdioSpec(set("[a-]")),
				field: path + "[0]", typ: field.ErrorTypeInvalid},
			invalidCase{name: which + " with an empty pattern", spec: stdioSpec(set("")),
				field: path + "[0]", typ: field.ErrorTypeRequired},
			invalidCase{name: which + " with a pattern of 257 characters", spec: stdioSpec(set(v1alpha1.ToolGlob(strings.Repeat("a", 257)))),
				field: path + "[0]", typ: field.ErrorTypeTooLong},
			invalidCase{name: which + " with 65 patterns", spec: stdioSpec(set(many...)),
				field: path, typ: field.ErrorTypeTooMany},
		)
	}
	return cases
}

func TestResolveRefusesInvalidSpec(t *testing.T) {
	for _, tc := range invalidSpecCases() {
		t.Run(tc.name, func(t *testing.T) {
			name := objName
			if tc.obj != nil {
				name = *tc.obj
			}
			p, err := policy.Resolve(testNS, name, tc.spec, tc.values, allLocal)
			if p != nil {
				t.Errorf("Resolve returned a policy with an error: %v", p)
			}
			errs := invalidErrs(t, err)

			var found bool
			for _, e := range errs {
				switch {
				case e.Field == tc.field:
					found = true
					if tc.typ != "" && e.Type != tc.typ {
						t.Errorf("error on %s has type %q, want %q (%v)", e.Field, e.Type, tc.typ, e)
					}
				case !contains(tc.also, e.Field):
					t.Errorf("unexpected error on another field: %v", e)
				}
			}
			if !found {
				t.Errorf("no error names %s; got %v", tc.field, errs)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) {
				t.Errorf("err.Error() = %q, does not name %s", msg, tc.field)
			}
			if tc.secret != "" && strings.Contains(msg, tc.secret) {
				t.Errorf("err.Error() leaks a secret: %q", msg)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestResolveReportsEveryBrokenRule(t *testing.T) {
	spec := stdioSpec(
		withServerName("bad.name"),
		withCommand(""),
		withEnv(envValue("", "x")),
		func(s *v1alpha1.McpServerSpec) {
			s.ToolCallTimeoutMs = ptr.To[int32](0)
			s.HealthCheckIntervalMs = ptr.To[int32](-1)
		},
		withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.MaxAttempts = ptr.To[int32](0) }),
	)
	_, err := policy.Resolve(testNS, objName, spec, nil, allLocal)
	errs := invalidErrs(t, err)
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{
		"spec.serverName",
		"spec.toolCallTimeoutMs",
		"spec.healthCheckIntervalMs",
		"spec.reconnect.maxAttempts",
		"spec.stdio.command",
		"spec.stdio.env[0].name",
	}
	for _, w := range want {
		if !contains(got, w) {
			t.Errorf("missing error on %s; got %v", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d errors %v, want %d", len(got), got, len(want))
	}
}

// ---- valid specs -----------------------------------------------------------

type validCase struct {
	name   string
	obj    *string
	spec   *v1alpha1.McpServerSpec
	values policy.Values
	check  func(t *testing.T, p *policy.Policy)
}

func wantServerName(want string) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.ServerName != want {
			t.Errorf("ServerName = %q, want %q", p.ServerName, want)
		}
	}
}

func wantEnv(want ...policy.EnvVar) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.Stdio == nil {
			t.Fatal("Stdio = nil")
		}
		if len(want) == 0 && len(p.Stdio.Env) == 0 {
			return
		}
		if !reflect.DeepEqual(p.Stdio.Env, want) {
			t.Errorf("Stdio.Env = %q, want %q", p.Stdio.Env, want)
		}
	}
}

func wantHeaders(want ...policy.Header) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.HTTP == nil {
			t.Fatal("HTTP = nil")
		}
		if len(want) == 0 && len(p.HTTP.Headers) == 0 {
			return
		}
		if !reflect.DeepEqual(p.HTTP.Headers, want) {
			t.Errorf("HTTP.Headers = %q, want %q", p.HTTP.Headers, want)
		}
	}
}

func wantURL(want string) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.HTTP == nil {
			t.Fatal("HTTP = nil")
		}
		if p.HTTP.URL != want {
			t.Errorf("HTTP.URL = %q, want %q", p.HTTP.URL, want)
		}
	}
}

func wantStdio(want policy.Stdio) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.Stdio == nil {
			t.Fatal("Stdio = nil")
		}
		if p.HTTP != nil {
			t.Errorf("HTTP = %+v, want nil for stdio", *p.HTTP)
		}
		got := *p.Stdio
		if want.Runtime == "" {
			want.Runtime = v1alpha1.RuntimeLocal // the runtime of allLocal
		}
		if len(got.Args) == 0 && len(want.Args) == 0 {
			got.Args, want.Args = nil, nil
		}
		if len(got.Env) == 0 && len(want.Env) == 0 {
			got.Env, want.Env = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Stdio = %+v, want %+v", got, want)
		}
	}
}

func wantReconnect(want policy.Reconnect) func(*testing.T, *policy.Policy) {
	return func(t *testing.T, p *policy.Policy) {
		if p.Reconnect != want {
			t.Errorf("Reconnect = %+v, want %+v", p.Reconnect, want)
		}
	}
}

func validSpecCases() []validCase {
	cases := []validCase{
		// serverName
		{name: "serverName of 1 character", spec: stdioSpec(withServerName("a")), check: wantServerName("a")},
		{name: "serverName of 32 characters", spec: stdioSpec(withServerName(strings.Repeat("Z", 32))),
			check: wantServerName(strings.Repeat("Z", 32))},
		{name: "serverName with every allowed character class", spec: stdioSpec(withServerName("aZ09_-")), check: wantServerName("aZ09_-")},
		{name: "serverName defaults to metadata.name", obj: ptr.To("github"), spec: stdioSpec(), check: wantServerName("github")},
		{name: "serverName defaults to a 32-character metadata.name", obj: ptr.To(strings.Repeat("n", 32)), spec: stdioSpec(),
			check: wantServerName(strings.Repeat("n", 32))},
		{name: "serverName given lets metadata.name be any DNS name", obj: ptr.To("my.server"), spec: stdioSpec(withServerName("my-server")),
			check: wantServerName("my-server")},

		// transports
		{name: "stdio transport resolves the stdio block",
			spec: stdioSpec(withCommand("npx"), withArgs("-y", "@modelcontextprotocol/server-github"), withCwd("/srv")),
			check: func(t *testing.T, p *policy.Policy) {
				if p.Transport != v1alpha1.TransportStdio {
					t.Errorf("Transport = %q", p.Transport)
				}
				wantStdio(policy.Stdio{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-github"}, Cwd: "/srv"})(t, p)
			}},
		{name: "streamable-http transport resolves the http block",
			spec: httpSpec(),
			check: func(t *testing.T, p *policy.Policy) {
				if p.Transport != v1alpha1.TransportStreamableHTTP {
					t.Errorf("Transport = %q", p.Transport)
				}
				if p.Stdio != nil {
					t.Errorf("Stdio = %+v, want nil for streamable-http", *p.Stdio)
				}
				wantURL(testURL)(t, p)
			}},

		// healthCheckIntervalMs
		{name: "healthCheckIntervalMs 0 disables the probe",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](0) }),
			check: func(t *testing.T, p *policy.Policy) {
				if p.HealthCheckInterval != 0 {
					t.Errorf("HealthCheckInterval = %v, want 0", p.HealthCheckInterval)
				}
			}},
		{name: "healthCheckIntervalMs 1",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](1) }),
			check: func(t *testing.T, p *policy.Policy) {
				if p.HealthCheckInterval != time.Millisecond {
					t.Errorf("HealthCheckInterval = %v, want 1ms", p.HealthCheckInterval)
				}
			}},
		{name: "healthCheckIntervalMs MaxInt32",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](math.MaxInt32) }),
			check: func(t *testing.T, p *policy.Policy) {
				if want := math.MaxInt32 * time.Millisecond; p.HealthCheckInterval != want {
					t.Errorf("HealthCheckInterval = %v, want %v", p.HealthCheckInterval, want)
				}
			}},
		{name: "failOnStartupError true",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.FailOnStartupError = ptr.To(true) }),
			check: func(t *testing.T, p *policy.Policy) {
				if !p.FailOnStartupError {
					t.Error("FailOnStartupError = false, want true")
				}
			}},
		{name: "failOnStartupError false explicitly",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.FailOnStartupError = ptr.To(false) }),
			check: func(t *testing.T, p *policy.Policy) {
				if p.FailOnStartupError {
					t.Error("FailOnStartupError = true, want false")
				}
			}},

		// reconnect
		{name: "maxAttempts 1", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.MaxAttempts = ptr.To[int32](1) })),
			check: wantReconnect(policy.Reconnect{Enabled: true, InitialDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second, MaxAttempts: 1})},
		{name: "maxAttempts MaxInt32", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.MaxAttempts = ptr.To[int32](math.MaxInt32) })),
			check: wantReconnect(policy.Reconnect{Enabled: true, InitialDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second, MaxAttempts: math.MaxInt32})},
		{name: "reconnect disabled", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) { r.Enabled = ptr.To(false) })),
			check: wantReconnect(policy.Reconnect{Enabled: false, InitialDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second, MaxAttempts: 10})},
		{name: "initialDelayMs equal to maxDelayMs", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.InitialDelayMs, r.MaxDelayMs = ptr.To[int32](1000), ptr.To[int32](1000)
		})), check: wantReconnect(policy.Reconnect{Enabled: true, InitialDelay: time.Second, MaxDelay: time.Second, MaxAttempts: 10})},
		{name: "initialDelayMs equal to the default maxDelayMs when maxDelayMs is unset", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.InitialDelayMs = ptr.To[int32](30000)
		})), check: wantReconnect(policy.Reconnect{Enabled: true, InitialDelay: 30 * time.Second, MaxDelay: 30 * time.Second, MaxAttempts: 10})},
		{name: "maxDelayMs equal to the default initialDelayMs when initialDelayMs is unset", spec: stdioSpec(withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.MaxDelayMs = ptr.To[int32](500)
		})), check: wantReconnect(policy.Reconnect{Enabled: true, InitialDelay: 500 * time.Millisecond, MaxDelay: 500 * time.Millisecond, MaxAttempts: 10})},

		// stdio bounds
		{name: "command of 4096 bytes", spec: stdioSpec(withCommand(strings.Repeat("c", 4096))),
			check: wantStdio(policy.Stdio{Command: strings.Repeat("c", 4096)})},
		{name: "256 args", spec: stdioSpec(withArgs(manyArgs(256)...)),
			check: wantStdio(policy.Stdio{Command: "mcp-server", Args: manyArgs(256)})},
		{name: "arg of 32768 bytes and an empty arg", spec: stdioSpec(withArgs(strings.Repeat("a", 32768), "")),
			check: wantStdio(policy.Stdio{Command: "mcp-server", Args: []string{strings.Repeat("a", 32768), ""}})},
		// Lengths count characters, as the CRD's maxLength does.
		{name: "command of 4096 two-byte characters", spec: stdioSpec(withCommand(strings.Repeat("é", 4096))),
			check: wantStdio(policy.Stdio{Command: strings.Repeat("é", 4096)})},
		{name: "cwd of 4096 bytes", spec: stdioSpec(withCwd(strings.Repeat("d", 4096))),
			check: wantStdio(policy.Stdio{Command: "mcp-server", Cwd: strings.Repeat("d", 4096)})},

		// stdio env
		{name: "env with a literal value", spec: stdioSpec(withEnv(envValue("LOG_LEVEL", "debug"))),
			check: wantEnv(policy.EnvVar{Name: "LOG_LEVEL", Value: "debug"})},
		{name: "env with an empty literal value", spec: stdioSpec(withEnv(envValue("EMPTY", ""))),
			check: wantEnv(policy.EnvVar{Name: "EMPTY", Value: ""})},
		{name: "env from a secretKeyRef", spec: stdioSpec(withEnv(envSecret("GITHUB_TOKEN", "github", "token"))),
			values: policy.Values{secretRef("github", "token"): "ghp_s3cr3t"},
			check:  wantEnv(policy.EnvVar{Name: "GITHUB_TOKEN", Value: "ghp_s3cr3t"})},
		{name: "env from a configMapKeyRef", spec: stdioSpec(withEnv(envConfigMap("REGION", "settings", "region"))),
			values: policy.Values{cmRef("settings", "region"): "eu-west-1"},
			check:  wantEnv(policy.EnvVar{Name: "REGION", Value: "eu-west-1"})},
		{name: "env with valueFrom and an empty value",
			spec: stdioSpec(withEnv(func() corev1.EnvVar {
				e := envSecret("TOKEN", "s", "k")
				e.Value = ""
				return e
			}())),
			values: policy.Values{secretRef("s", "k"): "v"},
			check:  wantEnv(policy.EnvVar{Name: "TOKEN", Value: "v"})},
		{name: "256 env entries", spec: stdioSpec(withEnv(manyEnv(256)...)),
			check: func(t *testing.T, p *policy.Policy) {
				if len(p.Stdio.Env) != 256 {
					t.Errorf("len(Stdio.Env) = %d, want 256", len(p.Stdio.Env))
				}
			}},
		{name: "env names differing only in case are distinct", spec: stdioSpec(withEnv(envValue("path", "a"), envValue("PATH", "b"))),
			check: wantEnv(policy.EnvVar{Name: "path", Value: "a"}, policy.EnvVar{Name: "PATH", Value: "b"})},

		// url
		{name: "url http", spec: httpSpec(withURL("http://tools.agents.svc:3000/mcp")), check: wantURL("http://tools.agents.svc:3000/mcp")},
		{name: "url https", spec: httpSpec(withURL("https://tools.example.com/mcp?x=1")), check: wantURL("https://tools.example.com/mcp?x=1")},
		{name: "url with an IPv6 host", spec: httpSpec(withURL("http://[::1]:8080/mcp")), check: wantURL("http://[::1]:8080/mcp")},
		{name: "url with a password is kept for the connection", spec: httpSpec(withURL("https://admin:pw@tools.example.com/mcp")),
			check: wantURL("https://admin:pw@tools.example.com/mcp")},
		{name: "url of 2048 bytes", spec: httpSpec(withURL(urlOfLen(2048))), check: wantURL(urlOfLen(2048))},

		// headers
		{name: "header with a token name", spec: httpSpec(withHeaders(hdrValue("X-Api-Key", "k"))),
			check: wantHeaders(policy.Header{Name: "X-Api-Key", Value: "k"})},
		{name: "header name with every token punctuation", spec: httpSpec(withHeaders(hdrValue("!#$%&'*+.^_`|~-Az09", "k"))),
			check: wantHeaders(policy.Header{Name: "!#$%&'*+.^_`|~-Az09", Value: "k"})},
		{name: "header name of 256 bytes", spec: httpSpec(withHeaders(hdrValue(strings.Repeat("x", 256), "k"))),
			check: wantHeaders(policy.Header{Name: strings.Repeat("x", 256), Value: "k"})},
		{name: "header value of 8192 bytes", spec: httpSpec(withHeaders(hdrValue("X-Big", strings.Repeat("v", 8192)))),
			check: wantHeaders(policy.Header{Name: "X-Big", Value: strings.Repeat("v", 8192)})},
		{name: "header with an empty literal value", spec: httpSpec(withHeaders(hdrValue("X-Empty", ""))),
			check: wantHeaders(policy.Header{Name: "X-Empty", Value: ""})},
		{name: "header from a secretKeyRef", spec: httpSpec(withHeaders(hdrSecret("Authorization", "web-token", "header"))),
			values: policy.Values{secretRef("web-token", "header"): "Bearer s3cr3t"},
			check:  wantHeaders(policy.Header{Name: "Authorization", Value: "Bearer s3cr3t"})},
		{name: "64 headers", spec: httpSpec(withHeaders(manyHeaders(64)...)),
			check: func(t *testing.T, p *policy.Policy) {
				if len(p.HTTP.Headers) != 64 {
					t.Errorf("len(HTTP.Headers) = %d, want 64", len(p.HTTP.Headers))
				}
			}},
	}

	// Every positive *Ms field: 1 and MaxInt32 are accepted.
	for _, f := range positiveMsFields {
		for _, v := range []int32{1, math.MaxInt32} {
			cases = append(cases, validCase{
				name: fmt.Sprintf("%s %d", strings.TrimPrefix(f.path, "spec."), v),
				spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { f.set(s, v) }),
				check: func(t *testing.T, p *policy.Policy) {
					if got, want := f.get(p), time.Duration(v)*time.Millisecond; got != want {
						t.Errorf("%s resolved to %v, want %v", f.path, got, want)
					}
				},
			})
		}
	}
	return cases
}

func TestResolveAcceptsValidSpec(t *testing.T) {
	for _, tc := range validSpecCases() {
		t.Run(tc.name, func(t *testing.T) {
			name := objName
			if tc.obj != nil {
				name = *tc.obj
			}
			p, err := policy.Resolve(testNS, name, tc.spec, tc.values, allLocal)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if p == nil {
				t.Fatal("Resolve returned a nil policy and no error")
			}
			tc.check(t, p)
		})
	}
}

// ---- defaults --------------------------------------------------------------

func TestResolveAppliesDefaults(t *testing.T) {
	defaults := func(transport v1alpha1.Transport) policy.Policy {
		return policy.Policy{
			ServerName:          objName,
			Transport:           transport,
			ToolCallTimeout:     60 * time.Second,
			ConnectionTimeout:   60 * time.Second,
			HealthCheckInterval: 30 * time.Second,
			FailOnStartupError:  false,
			Reconnect: policy.Reconnect{
				Enabled:      true,
				InitialDelay: 500 * time.Millisecond,
				MaxDelay:     30 * time.Second,
				MaxAttempts:  10,
			},
		}
	}
	stdioWant := defaults(v1alpha1.TransportStdio)
	stdioWant.Stdio = &policy.Stdio{Command: "mcp-server", Runtime: v1alpha1.RuntimeLocal}
	httpWant := defaults(v1alpha1.TransportStreamableHTTP)
	httpWant.HTTP = &policy.HTTP{URL: testURL}

	for _, tc := range []struct {
		name string
		spec *v1alpha1.McpServerSpec
		want policy.Policy
	}{
		{name: "stdio spec with every optional field unset", spec: stdioSpec(), want: stdioWant},
		{name: "streamable-http spec with every optional field unset", spec: httpSpec(), want: httpWant},
		{name: "empty reconnect block gets the reconnect defaults",
			spec: stdioSpec(func(s *v1alpha1.McpServerSpec) { s.Reconnect = &v1alpha1.ReconnectPolicy{} }), want: stdioWant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, nil, allLocal)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			got := *p
			// Normalise empty slices, which carry no meaning.
			if got.Stdio != nil {
				s := *got.Stdio
				if len(s.Args) == 0 {
					s.Args = nil
				}
				if len(s.Env) == 0 {
					s.Env = nil
				}
				got.Stdio = &s
			}
			if got.HTTP != nil && len(got.HTTP.Headers) == 0 {
				h := *got.HTTP
				h.Headers = nil
				got.HTTP = &h
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Resolve =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}

	t.Run("exported default constants match SPEC section 2", func(t *testing.T) {
		for _, c := range []struct {
			name      string
			got, want int
		}{
			{"DefaultToolCallTimeoutMs", policy.DefaultToolCallTimeoutMs, 60000},
			{"DefaultConnectionTimeoutMs", policy.DefaultConnectionTimeoutMs, 60000},
			{"DefaultHealthCheckIntervalMs", policy.DefaultHealthCheckIntervalMs, 30000},
			{"DefaultInitialDelayMs", policy.DefaultInitialDelayMs, 500},
			{"DefaultMaxDelayMs", policy.DefaultMaxDelayMs, 30000},
			{"DefaultMaxAttempts", policy.DefaultMaxAttempts, 10},
		} {
			if c.got != c.want {
				t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
			}
		}
	})
}

// ---- references ------------------------------------------------------------

func TestRefs(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *v1alpha1.McpServerSpec
		want []policy.Ref
	}{
		{name: "stdio spec without env has no refs", spec: stdioSpec(), want: nil},
		{name: "http spec without headers has no refs", spec: httpSpec(), want: nil},
		{name: "literal values are not refs",
			spec: stdioSpec(withEnv(envValue("A", "1"), envValue("B", "2"))), want: nil},
		{name: "env refs once each in spec order",
			spec: stdioSpec(withEnv(
				envSecret("A", "s1", "k"),
				envValue("B", "literal"),
				envConfigMap("C", "cm", "k"),
				envSecret("D", "s1", "k"), // same ref again
				envSecret("E", "s1", "other"),
				envConfigMap("F", "s1", "k"), // same name and key, other kind
				optionalEnv(envSecret("G", "s0", "k")),
			)),
			want: []policy.Ref{secretRef("s1", "k"), cmRef("cm", "k"), secretRef("s1", "other"), cmRef("s1", "k"), secretRef("s0", "k")}},
		{name: "header refs once each in spec order",
			spec: httpSpec(withHeaders(
				hdrSecret("Authorization", "web", "header"),
				hdrValue("X-Lit", "v"),
				hdrSecret("X-Api-Key", "api", "key"),
				hdrSecret("X-Again", "web", "header"),
			)),
			want: []policy.Ref{secretRef("web", "header"), secretRef("api", "key")}},
		{name: "refs without a name or key are left out",
			spec: stdioSpec(withEnv(envSecret("A", "", "k"), envConfigMap("B", "cm", ""), envSecret("C", "s", "k"))),
			want: []policy.Ref{secretRef("s", "k")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := policy.Refs(tc.spec)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Refs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResolveMissingRequiredRef(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      *v1alpha1.McpServerSpec
		values    policy.Values
		wantField string
		wantRef   policy.Ref
	}{
		{name: "env secretKeyRef with the Secret absent",
			spec:      stdioSpec(withEnv(envSecret("TOKEN", "github", "token"))),
			wantField: "spec.stdio.env[0].valueFrom.secretKeyRef", wantRef: secretRef("github", "token")},
		{name: "env secretKeyRef with an explicit optional false",
			spec: stdioSpec(withEnv(func() corev1.EnvVar {
				e := envSecret("TOKEN", "github", "token")
				e.ValueFrom.SecretKeyRef.Optional = ptr.To(false)
				return e
			}())),
			wantField: "spec.stdio.env[0].valueFrom.secretKeyRef", wantRef: secretRef("github", "token")},
		{name: "env secretKeyRef with the key absent",
			spec:      stdioSpec(withEnv(envSecret("TOKEN", "github", "token"))),
			values:    policy.Values{secretRef("github", "other"): "x", cmRef("github", "token"): "x"},
			wantField: "spec.stdio.env[0].valueFrom.secretKeyRef", wantRef: secretRef("github", "token")},
		{name: "env configMapKeyRef absent",
			spec:      stdioSpec(withEnv(envValue("A", "1"), envConfigMap("REGION", "settings", "region"))),
			wantField: "spec.stdio.env[1].valueFrom.configMapKeyRef", wantRef: cmRef("settings", "region")},
		{name: "header secretKeyRef absent",
			spec:      httpSpec(withHeaders(hdrValue("X-A", "1"), hdrSecret("Authorization", "web-token", "header"))),
			wantField: "spec.streamableHttp.headers[1].valueFrom.secretKeyRef", wantRef: secretRef("web-token", "header")},
		{name: "the first of several missing refs is named",
			spec:      stdioSpec(withEnv(envSecret("A", "s", "a"), envSecret("B", "s", "b"))),
			values:    policy.Values{},
			wantField: "spec.stdio.env[0].valueFrom.secretKeyRef", wantRef: secretRef("s", "a")},
		{name: "an optional missing ref does not hide a later required one",
			spec:      stdioSpec(withEnv(optionalEnv(envSecret("A", "s", "a")), envSecret("B", "s", "b"))),
			wantField: "spec.stdio.env[1].valueFrom.secretKeyRef", wantRef: secretRef("s", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, tc.values, allLocal)
			if p != nil {
				t.Errorf("Resolve returned a policy with a missing ref: %v", p)
			}
			var mre *policy.MissingRefError
			if !errors.As(err, &mre) {
				t.Fatalf("err = %v (%T), want *policy.MissingRefError", err, err)
			}
			if policy.IsInvalidSpec(err) {
				t.Error("IsInvalidSpec(missing ref) = true, want false: it heals by itself")
			}
			if mre.Field != tc.wantField {
				t.Errorf("Field = %q, want %q", mre.Field, tc.wantField)
			}
			if mre.Ref != tc.wantRef {
				t.Errorf("Ref = %v, want %v", mre.Ref, tc.wantRef)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.wantField) || !strings.Contains(msg, tc.wantRef.Name) {
				t.Errorf("err.Error() = %q, want it to name %s and %s", msg, tc.wantField, tc.wantRef.Name)
			}
		})
	}

	t.Run("an invalid spec wins over a missing ref", func(t *testing.T) {
		spec := stdioSpec(withCommand(""), withEnv(envSecret("A", "s", "k")))
		_, err := policy.Resolve(testNS, objName, spec, nil, allLocal)
		invalidErrs(t, err)
	})
}

func TestResolveOptionalRefs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   *v1alpha1.McpServerSpec
		values policy.Values
		check  func(*testing.T, *policy.Policy)
	}{
		{name: "optional Secret env absent is left out",
			spec:  stdioSpec(withEnv(envValue("A", "1"), optionalEnv(envSecret("B", "s", "k")), envValue("C", "3"))),
			check: wantEnv(policy.EnvVar{Name: "A", Value: "1"}, policy.EnvVar{Name: "C", Value: "3"})},
		{name: "optional ConfigMap env absent is left out",
			spec:  stdioSpec(withEnv(optionalEnv(envConfigMap("B", "c", "k")))),
			check: wantEnv()},
		{name: "optional Secret env present is set",
			spec:   stdioSpec(withEnv(optionalEnv(envSecret("B", "s", "k")))),
			values: policy.Values{secretRef("s", "k"): "val"},
			check:  wantEnv(policy.EnvVar{Name: "B", Value: "val"})},
		{name: "optional Secret header absent is left out",
			spec:  httpSpec(withHeaders(hdrValue("X-A", "1"), optionalHdr(hdrSecret("Authorization", "s", "k")))),
			check: wantHeaders(policy.Header{Name: "X-A", Value: "1"})},
		{name: "optional Secret header present is sent",
			spec:   httpSpec(withHeaders(optionalHdr(hdrSecret("Authorization", "s", "k")))),
			values: policy.Values{secretRef("s", "k"): "Bearer x"},
			check:  wantHeaders(policy.Header{Name: "Authorization", Value: "Bearer x"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, tc.values, allLocal)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			tc.check(t, p)
		})
	}
}

func TestResolveValuesLandInPolicyInSpecOrder(t *testing.T) {
	t.Run("stdio env", func(t *testing.T) {
		spec := stdioSpec(withEnv(
			envValue("LOG_LEVEL", "debug"),
			envSecret("GITHUB_TOKEN", "github", "token"),
			envConfigMap("REGION", "settings", "region"),
			envSecret("SAME_SECRET_AGAIN", "github", "token"),
		))
		values := policy.Values{secretRef("github", "token"): "ghp_s3cr3t", cmRef("settings", "region"): "eu-west-1"}
		p, err := policy.Resolve(testNS, objName, spec, values, allLocal)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		wantEnv(
			policy.EnvVar{Name: "LOG_LEVEL", Value: "debug"},
			policy.EnvVar{Name: "GITHUB_TOKEN", Value: "ghp_s3cr3t"},
			policy.EnvVar{Name: "REGION", Value: "eu-west-1"},
			policy.EnvVar{Name: "SAME_SECRET_AGAIN", Value: "ghp_s3cr3t"},
		)(t, p)
	})
	t.Run("http headers", func(t *testing.T) {
		spec := httpSpec(withHeaders(
			hdrSecret("Authorization", "web-token", "header"),
			hdrValue("X-Tenant", "acme"),
		))
		values := policy.Values{secretRef("web-token", "header"): "Bearer s3cr3t"}
		p, err := policy.Resolve(testNS, objName, spec, values, allLocal)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		wantHeaders(
			policy.Header{Name: "Authorization", Value: "Bearer s3cr3t"},
			policy.Header{Name: "X-Tenant", Value: "acme"},
		)(t, p)
	})
	t.Run("policy does not alias the spec", func(t *testing.T) {
		spec := stdioSpec(withArgs("a", "b"), withEnv(envValue("A", "1")))
		p, err := policy.Resolve(testNS, objName, spec, nil, allLocal)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		spec.Stdio.Args[0] = "changed"
		spec.Stdio.Env[0].Value = "changed"
		if p.Stdio.Args[0] != "a" || p.Stdio.Env[0].Value != "1" {
			t.Errorf("editing the spec changed the policy: %+v", *p.Stdio)
		}
	})
}
