package chart_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/mcpbridge/operator/internal/testenv"
)

// TestDefaultRender lists what a default install creates.
func TestDefaultRender(t *testing.T) {
	g := NewWithT(t)
	objs, _ := render(t, nil)
	g.Expect(kindNames(objs)).To(ConsistOf(
		"CustomResourceDefinition/mcpservers.mcpbridge.dev",
		"CustomResourceDefinition/mcptoolsets.mcpbridge.dev",
		"ServiceAccount/mcp-bridge-manager",
		"ClusterRole/mcp-bridge-manager",
		"ClusterRoleBinding/mcp-bridge-manager",
		"Role/mcp-bridge-leader-election",
		"RoleBinding/mcp-bridge-leader-election",
		"ClusterRole/mcp-bridge-gateway-user",
		"ClusterRole/mcp-bridge-metrics-reader",
		"Deployment/mcp-bridge-manager",
		"PodDisruptionBudget/mcp-bridge-manager",
		"Service/mcp-bridge-gateway",
		"Service/mcp-bridge-metrics",
		"ValidatingAdmissionPolicy/mcp-bridge-author-references",
		"ValidatingAdmissionPolicyBinding/mcp-bridge-author-references",
		"ValidatingAdmissionPolicy/mcp-bridge-manager-writes",
		"ValidatingAdmissionPolicyBinding/mcp-bridge-manager-writes",
	))
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || strings.HasPrefix(o.GetKind(), "Cluster") ||
			strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			g.Expect(o.GetNamespace()).To(BeEmpty(), "%s/%s", o.GetKind(), o.GetName())
		} else {
			g.Expect(o.GetNamespace()).To(Equal(releaseNamespace), "%s/%s", o.GetKind(), o.GetName())
		}
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/instance", releaseName), "%s/%s", o.GetKind(), o.GetName())
	}
	crd := find(t, objs, "CustomResourceDefinition", "mcpservers.mcpbridge.dev")
	g.Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
	g.Expect(managerOf(t, objs).Spec.Template.Spec.Containers[0].Image).To(Equal("ghcr.io/mcpbridge/operator:" + loadChart(t).Metadata.AppVersion))
}

// TestValuesReachTheManager renders the non-default value sets and checks
// that each value ends up where it means something.
func TestValuesReachTheManager(t *testing.T) {
	t.Run("custom", func(t *testing.T) {
		g := NewWithT(t)
		objs, notes := render(t, valueSets["custom"])
		d := managerOf(t, objs)
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		g.Expect(c.Args).To(Equal([]string{
			"--leader-elect",
			"--replica-lease-duration=30s", "--replica-bind-address=:9091",
			"--metrics-bind-address=:9443", "--metrics-secure", "--metrics-cert-path=/etc/mcpbridge/metrics-certs",
			"--enable-http2",
			"--health-probe-bind-address=:9081",
			"--gateway-bind-address=:9090", "--gateway-token-audiences=mcpbridge.dev,agents.example.com",
			"--gateway-cert-dir=/etc/mcpbridge/gateway-certs",
			"--gateway-max-sessions-per-identity=8", "--gateway-max-sessions-per-namespace=100", "--gateway-max-inflight-calls-per-identity=4",
			"--gateway-max-inflight-calls-per-namespace=40", "--gateway-max-result-bytes-per-namespace=128Mi",
			"--max-tool-bytes-per-namespace=32Mi",
			"--gateway-token-review-qps=40", "--gateway-token-review-burst=80",
			"--gateway-token-review-qps-per-source=2.5", "--gateway-token-review-burst-per-source=4",
			"--gateway-access-review-qps-per-identity=0.5", "--gateway-access-review-burst-per-identity=20",
			"--gateway-max-access-reviews-per-request=8",
			"--watch-namespaces=agents,tools",
			"--local-stdio-namespaces=agents,dev",
			"--shim-image=registry.example.com/mcpbridge/operator:shim",
			"--node-image=registry.example.com/node:22",
			"--python-image=registry.example.com/uv:python3.13",
			"--min-reconnect-delay=250ms", "--min-health-check-interval=0",
			"--max-tool-call-timeout=1h30m", "--max-connection-timeout=2m",
			"--upstream-allow-cidrs=127.0.0.1/32,fe80::/10",
			"--zap-devel", "--zap-log-level=debug", "--zap-encoder=console", "--zap-stacktrace-level=panic",
			"--zap-time-encoding=iso8601",
			"--zap-log-level=2",
		}))
		g.Expect(c.Image).To(Equal("registry.example.com/mcpbridge/operator@sha256:" + strings.Repeat("ab", 32)))
		g.Expect(c.ImagePullPolicy).To(Equal(corev1.PullAlways))
		g.Expect(c.Env).To(Equal([]corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "OTEL_SERVICE_NAME", Value: "mcp-bridge"},
		}))
		g.Expect(c.Resources.Limits.Memory().String()).To(Equal("1Gi"))
		g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
		g.Expect(pod.ServiceAccountName).To(Equal("bridge-sa"))
		g.Expect(pod.ImagePullSecrets).To(ConsistOf(corev1.LocalObjectReference{Name: "registry"}))
		g.Expect(pod.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
		g.Expect(pod.Tolerations).To(HaveLen(1))
		g.Expect(pod.Affinity.NodeAffinity).NotTo(BeNil())
		g.Expect(pod.TopologySpreadConstraints).To(HaveLen(1))
		g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue("example.com/team", "ai"))
		g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("team", "ai"))
		g.Expect(d.Spec.Selector.MatchLabels).NotTo(HaveKey("team"), "pod labels must not change the selector")
		g.Expect(pod.Volumes).To(ContainElement(corev1.Volume{Name: "metrics-certs",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "metrics-tls"}}}))
		g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "metrics-certs",
			MountPath: "/etc/mcpbridge/metrics-certs", ReadOnly: true}))
		g.Expect(pod.Volumes).To(ContainElement(corev1.Volume{Name: "gateway-certs",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gateway-tls"}}}))
		g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "gateway-certs",
			MountPath: "/etc/mcpbridge/gateway-certs", ReadOnly: true}))

		// Namespaced RBAC, and the policy that confines this release's
		// ServiceAccount.
		for _, ns := range []string{"agents", "tools"} {
			g.Expect(objs).To(ContainElement(SatisfyAll(HaveField("Object", HaveKeyWithValue("kind", "Role")),
				WithTransform(func(o *unstructured.Unstructured) string { return o.GetNamespace() + "/" + o.GetName() }, Equal(ns+"/bridge-manager")))))
		}
		mw := find(t, objs, "ValidatingAdmissionPolicy", "bridge-manager-writes")
		g.Expect(mw.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("matchConditions", ContainElement(HaveKeyWithValue("expression",
			"request.userInfo.username == 'system:serviceaccount:mcpbridge-system:bridge-sa'")))))

		sa := find(t, objs, "ServiceAccount", "bridge-sa")
		g.Expect(sa.GetAnnotations()).To(HaveKeyWithValue("example.com/role", "mcp"))
		crd := find(t, objs, "CustomResourceDefinition", "mcpservers.mcpbridge.dev")
		g.Expect(crd.GetAnnotations()).NotTo(HaveKey("helm.sh/resource-policy"))

		gw := service(t, objs, "bridge-gateway")
		g.Expect(gw.Spec.Type).To(Equal(corev1.ServiceTypeNodePort))
		g.Expect(gw.Spec.Ports[0].Port).To(Equal(int32(80)))
		g.Expect(gw.Annotations).To(HaveKeyWithValue("example.com/lb", "internal"))
		m := service(t, objs, "bridge-metrics")
		g.Expect(m.Spec.Ports[0].Port).To(Equal(int32(443)))
		g.Expect(m.Annotations).To(HaveKeyWithValue("example.com/scrape", "yes"))

		sm := serviceMonitor(t, objs)
		g.Expect(sm.Labels).To(HaveKeyWithValue("release", "prometheus"))
		ep := sm.Spec.Endpoints[0]
		g.Expect(ep.Scheme.String()).To(Equal("https"))
		g.Expect(string(ep.Interval)).To(Equal("15s"))
		g.Expect(string(ep.ScrapeTimeout)).To(Equal("10s"))
		g.Expect(*ep.TLSConfig.ServerName).To(Equal("bridge-metrics.mcpbridge-system.svc"))
		g.Expect(ep.TLSConfig.CA.Secret.Name).To(Equal("metrics-tls"))
		g.Expect(ep.BearerTokenFile).To(Equal("/var/run/secrets/kubernetes.io/serviceaccount/token")) //nolint:staticcheck // see servicemonitor.yaml

		g.Expect(notes).To(ContainSubstring("https://bridge-gateway.mcpbridge-system.svc:80/namespaces/<namespace>/mcp"))
		g.Expect(notes).To(ContainSubstring("kubectl -n agents create token my-agent --audience mcpbridge.dev"))
	})

	t.Run("minimal", func(t *testing.T) {
		g := NewWithT(t)
		objs, notes := render(t, valueSets["minimal"])
		g.Expect(kindNames(objs)).To(ConsistOf(
			"ClusterRole/mcp-bridge-manager",
			"ClusterRoleBinding/mcp-bridge-manager",
			"ClusterRole/mcp-bridge-gateway-user",
			"ClusterRole/mcp-bridge-metrics-reader",
			"Role/mcp-bridge-leader-election",
			"RoleBinding/mcp-bridge-leader-election",
			"Deployment/mcp-bridge-manager",
		), "no CRD, ServiceAccount, Services or ServiceMonitor; the Lease Role also without leader election, for the replicas' Leases")
		c := managerOf(t, objs).Spec.Template.Spec.Containers[0]
		g.Expect(c.Args).To(Equal([]string{
			"--replica-lease-duration=10s", "--replica-bind-address=:8091",
			"--metrics-bind-address=0", "--metrics-secure",
			"--health-probe-bind-address=:8081",
			"--gateway-bind-address=127.0.0.1:8090", "--gateway-auth=none",
			"--gateway-dns-names=mcp-bridge-gateway,mcp-bridge-gateway.mcpbridge-system,mcp-bridge-gateway.mcpbridge-system.svc,mcp-bridge-gateway.mcpbridge-system.svc.cluster.local",
			"--gateway-max-sessions-per-identity=64", "--gateway-max-sessions-per-namespace=1024", "--gateway-max-inflight-calls-per-identity=32",
			"--gateway-max-inflight-calls-per-namespace=256", "--gateway-max-result-bytes-per-namespace=64Mi",
			"--max-tool-bytes-per-namespace=64Mi",
			"--gateway-token-review-qps=20", "--gateway-token-review-burst=50",
			"--gateway-token-review-qps-per-source=5", "--gateway-token-review-burst-per-source=10",
			"--gateway-access-review-qps-per-identity=10", "--gateway-access-review-burst-per-identity=100",
			"--gateway-max-access-reviews-per-request=32",
			"--shim-image=ghcr.io/mcpbridge/operator:" + loadChart(t).Metadata.AppVersion,
		}))
		g.Expect(c.Ports).NotTo(ContainElement(HaveField("Name", "metrics")))
		g.Expect(notes).To(ContainSubstring("WITHOUT authentication"))
		g.Expect(notes).To(ContainSubstring("port-forward deployment/mcp-bridge-manager 8090:8090"))
	})

	t.Run("plain-metrics", func(t *testing.T) {
		g := NewWithT(t)
		objs, notes := render(t, valueSets["plain-metrics"])
		g.Expect(managerOf(t, objs).Spec.Template.Spec.Containers[0].Args).To(ContainElement("--metrics-secure=false"))
		ep := serviceMonitor(t, objs).Spec.Endpoints[0]
		g.Expect(ep.Scheme.String()).To(Equal("http"))
		g.Expect(ep.BearerTokenFile).To(BeEmpty()) //nolint:staticcheck // see servicemonitor.yaml
		g.Expect(ep.TLSConfig).To(BeNil())
		g.Expect(notes).To(ContainSubstring("plain HTTP"))
	})
}

// TestGatewayTLSValues: by default the manager issues the gateway's
// certificate for the gateway Service's names; with certManager a
// Certificate for the same names fills the Secret mounted as
// --gateway-cert-dir; with enabled false the gateway serves plain HTTP.
func TestGatewayTLSValues(t *testing.T) {
	svcNames := []string{"mcp-bridge-gateway", "mcp-bridge-gateway.mcpbridge-system", "mcp-bridge-gateway.mcpbridge-system.svc",
		"mcp-bridge-gateway.mcpbridge-system.svc.cluster.local"}
	t.Run("issued by the manager", func(t *testing.T) {
		g := NewWithT(t)
		objs, _ := render(t, nil)
		pod := managerOf(t, objs).Spec.Template.Spec
		g.Expect(pod.Containers[0].Args).To(ContainElement("--gateway-dns-names=" + strings.Join(svcNames, ",")))
		g.Expect(pod.Containers[0].Args).NotTo(ContainElement(HavePrefix("--gateway-cert-dir")))
		g.Expect(pod.Volumes).NotTo(ContainElement(HaveField("Name", "gateway-certs")))
		g.Expect(kindNames(objs)).NotTo(ContainElement(HavePrefix("Certificate/")))
	})
	t.Run("cert-manager", func(t *testing.T) {
		g := NewWithT(t)
		objs, notes := render(t, valueSets["cert-manager"])
		pod := managerOf(t, objs).Spec.Template.Spec
		g.Expect(pod.Containers[0].Args).To(ContainElement("--gateway-cert-dir=/etc/mcpbridge/gateway-certs"))
		g.Expect(pod.Containers[0].Args).NotTo(ContainElement(HavePrefix("--gateway-dns-names")))
		g.Expect(pod.Volumes).To(ContainElement(corev1.Volume{Name: "gateway-certs",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "mcp-bridge-gateway-tls"}}}))
		g.Expect(pod.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "gateway-certs",
			MountPath: "/etc/mcpbridge/gateway-certs", ReadOnly: true}))
		cert := find(t, objs, "Certificate", "mcp-bridge-gateway")
		g.Expect(cert.GetAPIVersion()).To(Equal("cert-manager.io/v1"))
		g.Expect(cert.GetNamespace()).To(Equal(releaseNamespace))
		g.Expect(cert.Object["spec"]).To(Equal(map[string]any{
			"secretName": "mcp-bridge-gateway-tls",
			"dnsNames":   append(toAny(svcNames), "mcp.example.com"),
			"usages":     []any{"server auth", "digital signature"},
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": float64(256), "rotationPolicy": "Always"},
			"duration":   "720h", "renewBefore": "240h",
			"issuerRef": map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"},
		}))
		g.Expect(notes).To(ContainSubstring("https://mcp-bridge-gateway.mcpbridge-system.svc:8090/namespaces/<namespace>/mcp"))
		g.Expect(notes).NotTo(ContainSubstring("ConfigMap mcpbridge-gateway-ca"))
	})
	t.Run("into a Secret of one's own", func(t *testing.T) {
		g := NewWithT(t)
		objs, _ := render(t, map[string]any{"gateway": map[string]any{"tls": map[string]any{"secretName": "gw",
			"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "ca"}}}}})
		g.Expect(find(t, objs, "Certificate", "mcp-bridge-gateway").Object["spec"]).To(And(
			HaveKeyWithValue("secretName", "gw"),
			HaveKeyWithValue("issuerRef", map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"})))
		g.Expect(managerOf(t, objs).Spec.Template.Spec.Volumes).To(ContainElement(corev1.Volume{Name: "gateway-certs",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gw"}}}))
	})
	t.Run("plain HTTP", func(t *testing.T) {
		g := NewWithT(t)
		objs, notes := render(t, map[string]any{"gateway": map[string]any{"tls": map[string]any{"enabled": false}}})
		args := managerOf(t, objs).Spec.Template.Spec.Containers[0].Args
		g.Expect(args).To(ContainElement("--gateway-tls=false"))
		g.Expect(args).NotTo(ContainElement(HavePrefix("--gateway-dns-names")))
		g.Expect(notes).To(ContainSubstring("http://mcp-bridge-gateway.mcpbridge-system.svc:8090/namespaces/<namespace>/mcp"))
	})
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestTracingValuesReachTheManager: the tracing values become the OTEL_*
// variables the manager reads at start, before tracing.env and
// manager.extraEnv; by default the manager gets none, and traces nothing.
// POD_NAME and POD_IP, which name the replica, come first.
func TestTracingValuesReachTheManager(t *testing.T) {
	g := NewWithT(t)
	objs, _ := render(t, nil)
	downward := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	}
	g.Expect(managerOf(t, objs).Spec.Template.Spec.Containers[0].Env).To(Equal(downward))

	headers := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "otlp-auth"}, Key: "headers"}}
	objs, _ = render(t, map[string]any{
		"tracing": map[string]any{"endpoint": "http://otel-collector.observability:4317", "protocol": "grpc", "samplerRatio": "0.25",
			"env": []any{map[string]any{"name": "OTEL_EXPORTER_OTLP_HEADERS",
				"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "otlp-auth", "key": "headers"}}}}},
		"manager": map[string]any{"extraEnv": []any{map[string]any{"name": "OTEL_SERVICE_NAME", "value": "bridge-eu"}}},
	})
	g.Expect(managerOf(t, objs).Spec.Template.Spec.Containers[0].Env).To(Equal(append(downward, []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability:4317"},
		{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: "grpc"},
		{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
		{Name: "OTEL_TRACES_SAMPLER_ARG", Value: "0.25"},
		{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: headers},
		{Name: "OTEL_SERVICE_NAME", Value: "bridge-eu"},
	}...)))
}

// TestNotesTellHowToUseTheGateway checks NOTES.txt of a default install:
// the gateway's address, how to make an agent's token, how to let
// Prometheus read the metrics, and that uninstall keeps the CRD.
func TestNotesTellHowToUseTheGateway(t *testing.T) {
	g := NewWithT(t)
	_, notes := render(t, nil)
	t.Log(notes)
	for _, want := range []string{
		"https://mcp-bridge-gateway.mcpbridge-system.svc:8090/namespaces/<namespace>/mcp",
		"ConfigMap mcpbridge-gateway-ca",
		"--clusterrole=mcp-bridge-gateway-user --serviceaccount=agents:my-agent",
		"kubectl -n agents create token my-agent --audience mcpbridge.dev",
		"port-forward service/mcp-bridge-gateway 8090:8090",
		"--clusterrole=mcp-bridge-metrics-reader",
		"kubectl delete crd mcpservers.mcpbridge.dev",
	} {
		g.Expect(notes).To(ContainSubstring(want))
	}
}

// TestEveryValueSetRendersAHardenedManager holds every value set to the
// same checks as config/default (test/deploy): restricted pod, probes on
// the probe port, Services that reach the pod.
func TestEveryValueSetRendersAHardenedManager(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs, _ := render(t, vals)
			d := managerOf(t, objs)
			// What a value set turns off on purpose.
			asked := map[string][]string{
				"minimal":       {"the manager runs without --leader-elect", "the gateway runs without authentication"},
				"plain-metrics": {"the metrics are served without authentication"},
			}[name]
			for _, p := range testenv.ManagerPodProblems(d) {
				if !slices.Contains(asked, p) {
					t.Error(p)
				}
			}
			problems, err := testenv.ServiceProblems(objs, d)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

// TestEveryRenderedFlagIsTheManagers runs the manager binary with each
// value set's arguments and --help last: it exits 0 only when it defines
// every flag before it, so the chart never passes a flag the manager lacks.
func TestEveryRenderedFlagIsTheManagers(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manager")
	if err := testenv.Build(bin, "./cmd/manager"); err != nil {
		t.Fatal(err)
	}
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs, _ := render(t, vals)
			args := managerOf(t, objs).Spec.Template.Spec.Containers[0].Args
			cmd := exec.Command(bin, append(slices.Clone(args), "--help")...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("manager %s --help: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
	// Run by hand, the manager's Pods take the shim from the image this
	// chart version deploys.
	t.Run("default shim image", func(t *testing.T) {
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("manager --help: %v\n%s", err, out)
		}
		want := `(default "ghcr.io/mcpbridge/operator:` + loadChart(t).Metadata.AppVersion + `")`
		i := strings.Index(string(out), "-shim-image")
		if i < 0 || !strings.Contains(strings.SplitN(string(out[i:]), "\n  -", 2)[0], want) {
			t.Errorf("--help does not give --shim-image the default %s:\n%s", want, out)
		}
	})
}

func kindNames(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s/%s among %v", kind, name, kindNames(objs))
	return nil
}

func managerOf(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	d, err := testenv.ManagerDeployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func service(t *testing.T, objs []*unstructured.Unstructured, name string) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Service", name).Object, &svc); err != nil {
		t.Fatal(err)
	}
	return &svc
}

// serviceMonitor decodes the one ServiceMonitor strictly into
// prometheus-operator's own Go type: a misspelt or misplaced field fails.
func serviceMonitor(t *testing.T, objs []*unstructured.Unstructured) *monitoringv1.ServiceMonitor {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one ServiceMonitor, got %d", len(found))
	}
	b, err := json.Marshal(found[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var sm monitoringv1.ServiceMonitor
	if err := dec.Decode(&sm); err != nil {
		t.Fatalf("the ServiceMonitor is not prometheus-operator's: %v\n%s", err, b)
	}
	if sm.APIVersion != monitoringv1.SchemeGroupVersion.String() || sm.Kind != monitoringv1.ServiceMonitorsKind {
		t.Fatalf("apiVersion %s kind %s", sm.APIVersion, sm.Kind)
	}
	return &sm
}
