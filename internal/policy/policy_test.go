package policy_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/ptr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// Values that must never show up when a policy is printed or logged.
const (
	envSecretValue    = "env-secret-value-7f3a"
	envConfigMapValue = "env-configmap-value-91c2"
	envLiteralValue   = "env-literal-value-55d0"
	hdrSecretValue    = "Bearer header-secret-value-c4e8"
	hdrLiteralValue   = "header-literal-value-0b6d"
	urlPassword       = "url-password-e2a9"
)

func secretStdioSpec() *v1alpha1.McpServerSpec {
	return stdioSpec(withCommand("npx"), withArgs("-y", "server"), withEnv(
		envSecret("GITHUB_TOKEN", "github", "token"),
		envConfigMap("REGION", "settings", "region"),
		envValue("LITERAL", envLiteralValue),
	))
}

func secretHTTPSpec() *v1alpha1.McpServerSpec {
	return httpSpec(
		withURL("https://admin:"+urlPassword+"@tools.example.com/mcp"),
		withHeaders(
			hdrSecret("Authorization", "web-token", "header"),
			hdrValue("X-Api-Key", hdrLiteralValue),
		),
	)
}

func secretValues() policy.Values {
	return policy.Values{
		secretRef("github", "token"):     envSecretValue,
		cmRef("settings", "region"):      envConfigMapValue,
		secretRef("web-token", "header"): hdrSecretValue,
	}
}

func mustResolve(t *testing.T, spec *v1alpha1.McpServerSpec, values policy.Values) *policy.Policy {
	t.Helper()
	p, err := policy.Resolve(testNS, objName, spec, values, allLocal)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return p
}

// renderings are the ways a policy reaches a log line or a message.
func renderings(t *testing.T, p *policy.Policy) map[string]string {
	t.Helper()
	logJSON, err := json.Marshal(p.MarshalLog())
	if err != nil {
		t.Fatalf("json.Marshal(MarshalLog()): %v", err)
	}
	var logged strings.Builder
	log := funcr.New(func(prefix, args string) { logged.WriteString(prefix + args + "\n") }, funcr.Options{})
	log.Info("resolved", "policy", p)
	var loggedJSON strings.Builder
	jlog := funcr.NewJSON(func(obj string) { loggedJSON.WriteString(obj + "\n") }, funcr.Options{})
	jlog.Info("resolved", "policy", p)

	return map[string]string{
		"String()":               p.String(),
		"Sprintf %v":             fmt.Sprintf("%v", p),
		"Sprintf %s":             fmt.Sprintf("%s", p),
		"Sprintf %+v":            fmt.Sprintf("%+v", p),
		"json of MarshalLog()":   string(logJSON),
		"Sprintf %+v MarshalLog": fmt.Sprintf("%+v", p.MarshalLog()),
		"funcr logger":           logged.String(),
		"funcr JSON logger":      loggedJSON.String(),
	}
}

func TestPolicyRedactsSecrets(t *testing.T) {
	var _ logr.Marshaler = (*policy.Policy)(nil)
	var _ fmt.Stringer = (*policy.Policy)(nil)

	for _, tc := range []struct {
		name      string
		spec      *v1alpha1.McpServerSpec
		forbidden []string
		// shown proves the rendering is not trivially empty.
		shown []string
	}{
		{
			name:      "stdio env values",
			spec:      secretStdioSpec(),
			forbidden: []string{envSecretValue, envConfigMapValue, envLiteralValue},
			shown:     []string{"GITHUB_TOKEN", "REGION", "LITERAL", "npx", objName},
		},
		{
			name:      "http header values and url password",
			spec:      secretHTTPSpec(),
			forbidden: []string{hdrSecretValue, "header-secret-value-c4e8", hdrLiteralValue, urlPassword},
			shown:     []string{"Authorization", "X-Api-Key", "tools.example.com", objName},
		},
	} {
		p := mustResolve(t, tc.spec, secretValues())
		for how, out := range renderings(t, p) {
			t.Run(tc.name+" via "+how, func(t *testing.T) {
				for _, s := range tc.forbidden {
					if strings.Contains(out, s) {
						t.Errorf("leaks %q:\n%s", s, out)
					}
				}
				for _, s := range tc.shown {
					if !strings.Contains(out, s) {
						t.Errorf("does not show %q:\n%s", s, out)
					}
				}
			})
		}
	}
}

func TestPolicyStringRedactsURLPassword(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		want string // must appear in String()
	}{
		{name: "password in user info", url: "https://admin:" + urlPassword + "@tools.example.com/mcp", want: "tools.example.com"},
		{name: "percent-encoded password", url: "https://admin:" + urlPassword + "%21@tools.example.com/mcp", want: "tools.example.com"},
		{name: "unparseable url with a password", url: "https://admin:" + urlPassword + "%zz@tools.example.com/mcp", want: "unparseable"},
		{name: "url without user info is shown whole", url: "https://tools.example.com/mcp", want: "https://tools.example.com/mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &policy.Policy{ServerName: "s", Transport: v1alpha1.TransportStreamableHTTP, HTTP: &policy.HTTP{URL: tc.url}}
			for how, out := range map[string]string{"String()": p.String(), "MarshalLog()": fmt.Sprintf("%+v", p.MarshalLog())} {
				if strings.Contains(out, urlPassword) {
					t.Errorf("%s leaks the URL password: %s", how, out)
				}
				if !strings.Contains(out, tc.want) {
					t.Errorf("%s = %s, want it to contain %q", how, out, tc.want)
				}
			}
		})
	}
}

func TestPolicyStringOfZeroPolicy(t *testing.T) {
	p := &policy.Policy{}
	if s := p.String(); s == "" {
		t.Error("String() of a zero policy is empty")
	}
	_ = p.MarshalLog()
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestPolicyFingerprint(t *testing.T) {
	base := func() policy.Values { return secretValues() }
	with := func(ref policy.Ref, v string) policy.Values {
		vals := base()
		vals[ref] = v
		return vals
	}

	for _, tc := range []struct {
		name       string
		spec       func() *v1alpha1.McpServerSpec
		values     policy.Values
		wantChange bool
	}{
		{name: "stdio: same spec and values is stable", spec: secretStdioSpec, values: base()},
		{name: "stdio: an unreferenced value changing is stable", spec: secretStdioSpec,
			values: with(secretRef("unrelated", "k"), "x")},
		{name: "stdio: env Secret value rotated changes it", spec: secretStdioSpec,
			values: with(secretRef("github", "token"), envSecretValue+"-rotated"), wantChange: true},
		{name: "stdio: env ConfigMap value changed changes it", spec: secretStdioSpec,
			values: with(cmRef("settings", "region"), "us-east-1"), wantChange: true},
		{name: "stdio: env Secret value gaining a trailing byte changes it", spec: secretStdioSpec,
			values: with(secretRef("github", "token"), envSecretValue+" "), wantChange: true},
		{name: "stdio: literal env value changed changes it", values: base(), wantChange: true,
			spec: func() *v1alpha1.McpServerSpec {
				s := secretStdioSpec()
				s.Stdio.Env[2].Value = "other"
				return s
			}},
		{name: "stdio: a timeout changed changes it", values: base(), wantChange: true,
			spec: func() *v1alpha1.McpServerSpec {
				s := secretStdioSpec()
				s.ToolCallTimeoutMs = ptr.To[int32](1234)
				return s
			}},
		{name: "http: same spec and values is stable", spec: secretHTTPSpec, values: base()},
		{name: "http: header Secret value rotated changes it", spec: secretHTTPSpec,
			values: with(secretRef("web-token", "header"), "Bearer rotated"), wantChange: true},
		{name: "http: url password changed changes it", values: base(), wantChange: true,
			spec: func() *v1alpha1.McpServerSpec {
				s := secretHTTPSpec()
				s.StreamableHTTP.URL = "https://admin:other@tools.example.com/mcp"
				return s
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *policy.Policy
			if strings.HasPrefix(tc.name, "http") {
				before = mustResolve(t, secretHTTPSpec(), base())
			} else {
				before = mustResolve(t, secretStdioSpec(), base())
			}
			after := mustResolve(t, tc.spec(), tc.values)

			f1, f2 := before.Fingerprint(), after.Fingerprint()
			if !hexSHA256.MatchString(f1) {
				t.Errorf("Fingerprint = %q, want 64 lower-case hex digits", f1)
			}
			if f1 != before.Fingerprint() {
				t.Error("Fingerprint differs between two calls on the same policy")
			}
			if changed := f1 != f2; changed != tc.wantChange {
				t.Errorf("fingerprint changed = %v, want %v (%s vs %s)", changed, tc.wantChange, f1, f2)
			}
		})
	}

	t.Run("fingerprint does not contain a secret", func(t *testing.T) {
		p := mustResolve(t, secretStdioSpec(), secretValues())
		if fp := p.Fingerprint(); strings.Contains(fp, envSecretValue) {
			t.Errorf("Fingerprint contains the secret: %s", fp)
		}
	})

	t.Run("stable across many resolves", func(t *testing.T) {
		want := mustResolve(t, secretHTTPSpec(), secretValues()).Fingerprint()
		for range 50 {
			if got := mustResolve(t, secretHTTPSpec(), secretValues()).Fingerprint(); got != want {
				t.Fatalf("Fingerprint = %s, want %s", got, want)
			}
		}
	})

	t.Run("stdio and http policies differ", func(t *testing.T) {
		a := mustResolve(t, stdioSpec(), nil).Fingerprint()
		b := mustResolve(t, httpSpec(), nil).Fingerprint()
		if a == b {
			t.Error("stdio and http policies have the same fingerprint")
		}
	})

	t.Run("reconnect delay changed changes it", func(t *testing.T) {
		a := &policy.Policy{Reconnect: policy.Reconnect{InitialDelay: time.Second}}
		b := &policy.Policy{Reconnect: policy.Reconnect{InitialDelay: 2 * time.Second}}
		if a.Fingerprint() == b.Fingerprint() {
			t.Error("different reconnect delays have the same fingerprint")
		}
	})
}
