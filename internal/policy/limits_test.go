package policy_test

import (
	"bytes"
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// withDefaultLimits is allLocal with the floors and ceilings of the
// manager's flag defaults.
var withDefaultLimits = policy.RuntimeConfig{LocalNamespaces: allLocal.LocalNamespaces, Limits: policy.DefaultLimits()}

func TestDefaultLimitsMatchSpec(t *testing.T) {
	want := policy.Limits{
		MinReconnectDelay:      100 * time.Millisecond,
		MinHealthCheckInterval: time.Second,
		MaxToolCallTimeout:     10 * time.Minute,
		MaxConnectionTimeout:   10 * time.Minute,
	}
	if got := policy.DefaultLimits(); got != want {
		t.Errorf("DefaultLimits() = %+v, want %+v (docs/design.md, Limits)", got, want)
	}
}

func TestResolveRefusesSpecBeyondLimits(t *testing.T) {
	timeouts := func(call, conn, health int32) specMod {
		return func(s *v1alpha1.McpServerSpec) {
			s.ToolCallTimeoutMs, s.ConnectionTimeoutMs, s.HealthCheckIntervalMs = ptr.To(call), ptr.To(conn), ptr.To(health)
		}
	}
	delays := func(initial, maxDelay int32) specMod {
		return withReconnect(func(r *v1alpha1.ReconnectPolicy) {
			r.InitialDelayMs, r.MaxDelayMs = ptr.To(initial), ptr.To(maxDelay)
		})
	}
	for _, tc := range []struct {
		name  string
		spec  *v1alpha1.McpServerSpec
		field string
		flag  string
	}{
		{"tool call timeout above the ceiling", stdioSpec(timeouts(600001, 1000, 1000)),
			"spec.toolCallTimeoutMs", "--max-tool-call-timeout=10m0s"},
		{"24-day tool call timeout", httpSpec(timeouts(2073600000, 1000, 1000)),
			"spec.toolCallTimeoutMs", "--max-tool-call-timeout=10m0s"},
		{"connection timeout above the ceiling", stdioSpec(timeouts(1000, 600001, 1000)),
			"spec.connectionTimeoutMs", "--max-connection-timeout=10m0s"},
		{"1 ms health check", stdioSpec(timeouts(1000, 1000, 1)),
			"spec.healthCheckIntervalMs", "--min-health-check-interval=1s"},
		{"health check just under the floor", httpSpec(timeouts(1000, 1000, 999)),
			"spec.healthCheckIntervalMs", "--min-health-check-interval=1s"},
		{"1 ms reconnect delay", stdioSpec(delays(1, 5000)),
			"spec.reconnect.initialDelayMs", "--min-reconnect-delay=100ms"},
		{"reconnect delays both under the floor", stdioSpec(delays(1, 99)),
			"spec.reconnect.maxDelayMs", "--min-reconnect-delay=100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := policy.Resolve(testNS, objName, tc.spec, nil, allLocal); err != nil {
				t.Fatalf("without limits Resolve = %v, want the spec accepted", err)
			}
			_, err := policy.Resolve(testNS, objName, tc.spec, nil, withDefaultLimits)
			var named *field.Error
			for _, e := range invalidErrs(t, err) {
				if e.Field == tc.field {
					named = e
				}
			}
			if named == nil || named.Type != field.ErrorTypeInvalid {
				t.Fatalf("no Invalid error on %s: %v", tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("err = %q, does not name %s", err, tc.flag)
			}
		})
	}
}

func TestResolveAcceptsSpecWithinLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *v1alpha1.McpServerSpec
		want func(*policy.Policy) bool
	}{
		{"every bound exactly", stdioSpec(func(s *v1alpha1.McpServerSpec) {
			s.ToolCallTimeoutMs, s.ConnectionTimeoutMs, s.HealthCheckIntervalMs = ptr.To[int32](600000), ptr.To[int32](600000), ptr.To[int32](1000)
			s.Reconnect = &v1alpha1.ReconnectPolicy{InitialDelayMs: ptr.To[int32](100), MaxDelayMs: ptr.To[int32](100)}
		}), func(p *policy.Policy) bool {
			return p.ToolCallTimeout == 10*time.Minute && p.Reconnect.InitialDelay == 100*time.Millisecond
		}},
		{"health check disabled", httpSpec(func(s *v1alpha1.McpServerSpec) { s.HealthCheckIntervalMs = ptr.To[int32](0) }),
			func(p *policy.Policy) bool { return p.HealthCheckInterval == 0 }},
		{"every timing unset", stdioSpec(), func(p *policy.Policy) bool {
			return p.ToolCallTimeout == time.Minute && p.HealthCheckInterval == 30*time.Second
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Resolve(testNS, objName, tc.spec, nil, withDefaultLimits)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if !tc.want(p) {
				t.Errorf("unexpected policy %v", p)
			}
		})
	}
}

// An administrator's flag stricter than a default moves the default of a
// field the spec leaves unset, instead of refusing a spec that sets nothing.
func TestResolveClampsUnsetDefaultsIntoLimits(t *testing.T) {
	rt := allLocal
	rt.Limits = policy.Limits{MinReconnectDelay: time.Second, MinHealthCheckInterval: time.Minute,
		MaxToolCallTimeout: 5 * time.Second, MaxConnectionTimeout: 7 * time.Second}
	p, err := policy.Resolve(testNS, objName, stdioSpec(), nil, rt)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	got := []time.Duration{p.Reconnect.InitialDelay, p.Reconnect.MaxDelay, p.HealthCheckInterval, p.ToolCallTimeout, p.ConnectionTimeout}
	want := []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Second, 7 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("timing %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// The flags' defaults accept every McpServer the repository shows its
// users: config/samples and the README's examples.
func TestDefaultLimitsAcceptSamplesAndReadmeExamples(t *testing.T) {
	readme := filepath.Join("..", "..", "README.md")
	docs := readmeYAMLDocs(t, readme)
	samples, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*_mcpserver_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range samples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, yamlDoc{f, b})
	}
	var n int
	for _, d := range docs {
		var obj v1alpha1.McpServer
		if err := yaml.Unmarshal(d.body, &obj); err != nil || obj.Kind != "McpServer" {
			continue
		}
		n++
		_, err := policy.Resolve(cmp.Or(obj.Namespace, testNS), obj.Name, &obj.Spec, nil, withDefaultLimits)
		var missing *policy.MissingRefError
		if err != nil && !errors.As(err, &missing) {
			t.Errorf("%s: McpServer %s refused under the default limits: %v", d.from, obj.Name, err)
		}
	}
	t.Logf("%d McpServers resolved", n)
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	// Every manifest of the README names its kind once; none may slip by.
	if want := len(samples) + bytes.Count(text, []byte("kind: McpServer\n")); n != want || want <= len(samples) {
		t.Errorf("resolved %d McpServers of the README and %d samples, want %d; the parser misses some", n, len(samples), want)
	}
}

type yamlDoc struct {
	from string
	body []byte
}

var yamlFence = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// readmeYAMLDocs splits every yaml block of the README into documents.
func readmeYAMLDocs(t *testing.T, path string) []yamlDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []yamlDoc
	for i, m := range yamlFence.FindAllSubmatch(b, -1) {
		for _, doc := range bytes.Split(m[1], []byte("\n---\n")) {
			out = append(out, yamlDoc{"README.md yaml block " + strconv.Itoa(i+1), doc})
		}
	}
	return out
}
