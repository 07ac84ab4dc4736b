package chart_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
)

// monitoring turns the dashboard and the alerts on, with their defaults.
var monitoring = map[string]any{
	"grafanaDashboard": map[string]any{"enabled": true},
	"prometheusRule":   map[string]any{"enabled": true},
}

// TestMonitoringIsOffByDefault: neither a dashboard nor alerts without
// asking, since both need software the cluster may not run.
func TestMonitoringIsOffByDefault(t *testing.T) {
	objs, _ := render(t, nil)
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" || (o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard")) {
			t.Errorf("the defaults render %s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestGrafanaDashboardLoads: the ConfigMap carries the sidecar's label and
// a dashboard that loads: JSON with a uid, a title, panels whose targets
// are PromQL that parses once Grafana's variables are put in.
func TestGrafanaDashboardLoads(t *testing.T) {
	objs, _ := render(t, monitoring)
	cm := dashboardConfigMap(t, objs)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != releaseNamespace {
		t.Errorf("dashboard ConfigMap %s/%s with labels %v, want the label grafana_dashboard: \"1\" in %s",
			cm.Namespace, cm.Name, cm.Labels, releaseNamespace)
	}
	exprs := dashboardExprs(t, cm)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries, want its panels' queries", len(exprs))
	}
	for _, e := range exprs {
		if _, err := promql().ParseExpr(e); err != nil {
			t.Errorf("%s: %v", e, err)
		}
	}

	custom := dashboardConfigMap(t, renderObjs(t, "custom"))
	if custom.Namespace != "default" || custom.Labels["dashboards"] != "mcp" || custom.Annotations["grafana_folder"] != "MCP" {
		t.Errorf("custom dashboard ConfigMap %s/%s, labels %v, annotations %v", custom.Namespace, custom.Name, custom.Labels, custom.Annotations)
	}
}

// TestPrometheusRulePassesPrometheus: the PrometheusRule decodes strictly
// into prometheus-operator's type, and its groups pass Prometheus's own
// rule file parser (rulefmt), which also parses every expression.
func TestPrometheusRulePassesPrometheus(t *testing.T) {
	rule := prometheusRule(t, renderObjs(t, "monitoring"))
	groups := ruleGroups(t, rule)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	Expect := NewWithT(t).Expect
	Expect(alerts).To(ConsistOf("McpBridgeServerFailed", "McpBridgeReconnectStorm", "McpBridgeGatewayErrors",
		"McpBridgeGatewayAuthRateLimited", "McpBridgeReplicaWithoutOwnership", "McpBridgeReplicaUnreachable"))
	failed := groups.Groups[0].Rules[0]
	Expect(failed.For).To(Equal(model.Duration(5 * time.Minute)))

	// The custom values reach the rules.
	custom := prometheusRule(t, renderObjs(t, "custom"))
	Expect(custom.Labels).To(HaveKeyWithValue("release", "prometheus"))
	cg := ruleGroups(t, custom).Groups[0].Rules
	Expect(cg[0].For).To(Equal(model.Duration(15 * time.Minute)))
	Expect(cg[0].Labels).To(HaveKeyWithValue("team", "ai"))
	Expect(cg[1].Expr).To(And(ContainSubstring("[30m]"), HaveSuffix("> 25")))
	Expect(cg[2].Expr).To(HaveSuffix("> 0.2"))
	Expect(cg[2].For).To(Equal(model.Duration(30 * time.Minute)))
	Expect(cg[3].For).To(Equal(model.Duration(time.Minute)))
}

// TestMonitoringReadsOnlyExportedMetrics runs the manager binary on the
// control plane with a working and a failing McpServer and one tool call
// through its gateway, reads the metric names its /metrics exports, and
// requires every metric that a dashboard query or an alert names to be
// one of them: a renamed metric fails here, not in a user's Grafana.
func TestMonitoringReadsOnlyExportedMetrics(t *testing.T) {
	exported := liveMetricNames(t)
	objs := renderObjs(t, "monitoring")
	exprs := dashboardExprs(t, dashboardConfigMap(t, objs))
	for _, g := range ruleGroups(t, prometheusRule(t, objs)).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	named := map[string]bool{}
	for _, e := range exprs {
		names, err := metricNames(e)
		if err != nil {
			t.Errorf("%s: %v", e, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s names no metric", e)
		}
		for _, n := range names {
			named[n] = true
			if !exported[n] {
				t.Errorf("%s: the manager exports no metric %s", e, n)
			}
		}
	}
	// The check sees what it must: the names the panels are about.
	for _, n := range []string{"mcpbridge_server_phase", "mcpbridge_reconnect_attempts_total", "mcpbridge_tool_calls_total",
		"mcpbridge_tool_call_duration_seconds_bucket", "mcpbridge_gateway_requests_total", "process_cpu_seconds_total",
		"process_resident_memory_bytes"} {
		if !named[n] {
			t.Errorf("no query names %s", n)
		}
	}
}

func renderObjs(t *testing.T, set string) []*unstructured.Unstructured {
	t.Helper()
	vals := monitoring
	if set != "monitoring" {
		vals = valueSets[set]
	}
	objs, _ := render(t, vals)
	return objs
}

func promql() parser.Parser { return parser.NewParser(parser.Options{}) }

func dashboardConfigMap(t *testing.T, objs []*unstructured.Unstructured) *corev1.ConfigMap {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard") {
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
			return &cm
		}
	}
	t.Fatal("no dashboard ConfigMap")
	return nil
}

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// dashboardExprs loads the ConfigMap's dashboard and returns every query
// of its panels and variables, with Grafana's variables replaced by what
// Grafana would put in.
func dashboardExprs(t *testing.T, cm *corev1.ConfigMap) []string {
	t.Helper()
	if len(cm.Data) != 1 {
		t.Fatalf("the dashboard ConfigMap holds %d files, want one", len(cm.Data))
	}
	var d dashboard
	for name, raw := range cm.Data {
		dec := json.NewDecoder(strings.NewReader(raw))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("the dashboard has uid %q, title %q and %d panels", d.UID, d.Title, len(d.Panels))
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*", "$job", ".*")
	var out []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue // the data source variable
		}
		s, _ := q["query"].(string)
		// label_values(<selector>, <label>): the selector is PromQL.
		inner, ok := strings.CutPrefix(s, "label_values(")
		i := strings.LastIndex(inner, ",")
		if !ok || i < 0 {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, s)
			continue
		}
		out = append(out, vars.Replace(inner[:i]))
	}
	return out
}

func prometheusRule(t *testing.T, objs []*unstructured.Unstructured) *monitoringv1.PrometheusRule {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(found))
	}
	b, err := json.Marshal(found[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var r monitoringv1.PrometheusRule
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("the PrometheusRule does not decode into prometheus-operator's type: %v", err)
	}
	return &r
}

// ruleGroups hands the PrometheusRule's spec to Prometheus's rule file
// parser, strictly (no unknown fields), as Prometheus loads the file that
// prometheus-operator writes from it.
func ruleGroups(t *testing.T, r *monitoringv1.PrometheusRule) *rulefmt.RuleGroups {
	t.Helper()
	b, err := yaml.Marshal(r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, promql(), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("no rule groups in\n%s", b)
	}
	return groups
}

// metricNames lists the metric names an expression selects.
func metricNames(expr string) ([]string, error) {
	e, err := promql().ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// liveMetricNames runs the manager against the control plane, with
// plain-HTTP metrics and an unauthenticated gateway on loopback, makes the
// series of every vector appear (a Ready server, a failing one that
// schedules reconnects, a tool call and a refused request through the
// gateway) and returns every series name /metrics exports: counter and
// gauge names, and a histogram's _bucket, _sum and _count.
func liveMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	manager, fixture := filepath.Join(dir, "manager"), filepath.Join(dir, "mcp-fixture")
	g.Expect(testenv.Build(manager, "./cmd/manager")).To(Succeed())
	g.Expect(testenv.Build(fixture, "./test/fixture/cmd/mcp-fixture")).To(Succeed())
	metrics, gateway, probes := freeAddr(t), freeAddr(t), freeAddr(t)
	runManager(t, manager, nil, "--kubeconfig="+env.KubeconfigPath, "--metrics-secure=false", "--metrics-bind-address="+metrics,
		"--gateway-auth=none", "--gateway-tls=false", "--gateway-bind-address="+gateway, "--health-probe-bind-address="+probes,
		"--local-stdio-namespaces=*", "--min-reconnect-delay=0") // the failing server retries fast

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-"}}
	g.Expect(env.Client.Create(ctx(t), ns)).To(Succeed())
	for name, args := range map[string][]string{"fx": nil, "down": {"--no-such-flag"}} {
		g.Expect(env.Client.Create(ctx(t), &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio,
				Stdio:     &v1alpha1.StdioTransport{Command: fixture, Args: args},
				Reconnect: &v1alpha1.ReconnectPolicy{InitialDelayMs: ptrTo[int32](50), MaxDelayMs: ptrTo[int32](200), MaxAttempts: ptrTo[int32](3)}},
		})).To(Succeed())
	}
	g.Eventually(func() v1alpha1.Phase {
		var m v1alpha1.McpServer
		_ = env.Client.Get(ctx(t), client.ObjectKey{Namespace: ns.Name, Name: "fx"}, &m)
		return m.Status.Phase
	}, time.Minute, 100*time.Millisecond).Should(Equal(v1alpha1.PhaseReady))

	endpoint := "http://" + gateway + "/namespaces/" + ns.Name + "/mcp"
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "chart-test", Version: "1"}, nil).
		Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "hi"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Close()).To(Succeed())
	resp, err := http.Post("http://"+gateway+"/namespaces/Not_A_Namespace/mcp", "application/json", strings.NewReader("{}"))
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()

	var names map[string]bool
	g.Eventually(func(g Gomega) {
		var err error
		names, err = scrapeNames("http://" + metrics + "/metrics")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names).To(HaveKey("mcpbridge_reconnect_attempts_total"))
		g.Expect(names).To(HaveKey("mcpbridge_tool_call_duration_seconds_bucket"))
		g.Expect(names).To(HaveKey("mcpbridge_replica_peer_unreachable")) // once it has probed its own endpoint
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	return names
}

// scrapeNames reads the series names of a text exposition from its
// # TYPE lines.
func scrapeNames(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch f[3] {
		case "histogram":
			names[f[2]+"_bucket"], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
		case "summary":
			names[f[2]], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
		default:
			names[f[2]] = true
		}
	}
	return names, sc.Err()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// runManager starts the manager binary, with env added to this process's
// environment, until the test ends, and shows its log when the test failed.
// It returns the log's path and a channel that receives Wait's error once
// the manager exits.
func runManager(t *testing.T, bin string, env []string, args ...string) (string, chan error) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, ownReplicaAddress(t, args)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("the manager did not stop within 40s of SIGTERM")
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("manager %s\n%s", strings.Join(args, " "), b)
		}
	})
	return logPath, exited
}

// ownReplicaAddress gives the manager a replicas' endpoint on a free
// loopback port, in place of config/default's :8091 or the flag's default:
// managers of tests that run at once must not share one.
func ownReplicaAddress(t *testing.T, args []string) []string {
	out := make([]string, 0, len(args)+1)
	for _, a := range args {
		if !strings.HasPrefix(a, "--replica-bind-address=") {
			out = append(out, a)
		}
	}
	return append(out, "--replica-bind-address="+freeAddr(t))
}
