package chart_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
)

// TestEveryObjectPassesServerDryRun applies every object of every value set
// with client-side and server-side apply, dry run on the real apiserver
// (schema, validation, admission; nothing stored), plus a Pod from the
// manager's template, which PodSecurity admission checks against the
// namespace's restricted level.
func TestEveryObjectPassesServerDryRun(t *testing.T) {
	installMonitoringCRDs(t)
	installSchemalessCRD(t, "cert-manager.io", "Certificate")
	// The minimal set uses a ServiceAccount that exists before the chart.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "preexisting", Namespace: releaseNamespace}}
	if err := env.Client.Create(ctx(t), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The namespaces the custom set watches hold the manager's Roles.
	for _, name := range []string{"agents", "tools"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(ctx(t), ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs, _ := render(t, vals)
			pod, err := testenv.PodFromTemplate(managerOf(t, objs))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range append(objs, pod) {
				for _, mode := range [][]string{{"--dry-run=server"}, {"--server-side", "--dry-run=server"}} {
					out, err := env.Apply(ctx(t), o, mode...)
					if err != nil {
						t.Error(err)
					} else if !strings.Contains(out, "(server dry run)") {
						t.Errorf("%s/%s, kubectl apply %s: %q", o.GetKind(), o.GetName(), strings.Join(mode, " "), out)
					}
				}
			}
		})
	}
}

// TestInstallUpgradeUninstall runs helm install, upgrade and uninstall for
// real on the apiserver: the CRD comes with the release and stays after it,
// the manager's ServiceAccount may do its work, and an upgrade changes the
// manager's arguments.
func TestInstallUpgradeUninstall(t *testing.T) {
	g := NewWithT(t)
	// envtest installed the CRDs from config/crd/bases; a fresh cluster has none.
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "mcpservers.mcpbridge.dev"}}
	toolSets := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "mcptoolsets.mcpbridge.dev"}}
	for _, c := range []*apiextensionsv1.CustomResourceDefinition{crd, toolSets} {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(ctx(t), c))).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx(t), client.ObjectKeyFromObject(c), c))
		}, time.Minute, 100*time.Millisecond).Should(BeTrue(), "the CRD %s of envtest is not gone", c.Name)
	}

	rel := install(t, nil)
	objs, err := testenv.DecodeManifests(rel.Manifest)
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, got)).
			To(Succeed(), "%s/%s after helm install", o.GetKind(), o.GetName())
		g.Expect(got.GetAnnotations()).To(HaveKeyWithValue("meta.helm.sh/release-name", releaseName))
	}
	for _, p := range env.ManagerPermissionProblems(ctx(t), managerOf(t, objs)) {
		t.Error(p)
	}

	// The CRD Helm installed serves McpServers.
	g.Eventually(func() error {
		return env.Client.Create(ctx(t), &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
				StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: "http://tools.default.svc:3000/mcp"}},
		})
	}, time.Minute, 100*time.Millisecond).Should(Succeed())

	rel = upgrade(t, map[string]any{
		"gateway": map[string]any{"port": 9090},
		"manager": map[string]any{"watchNamespaces": []any{"default"}},
	})
	var d appsv1.Deployment
	g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: releaseNamespace, Name: "mcp-bridge-manager"}, &d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--gateway-bind-address=:9090", "--watch-namespaces=default"))
	g.Expect(rel.Version).To(Equal(2))

	info := uninstall(t)
	g.Expect(info).To(ContainSubstring("mcpservers.mcpbridge.dev"), "helm uninstall reports the CRD it keeps")
	g.Expect(info).To(ContainSubstring("mcptoolsets.mcpbridge.dev"), "helm uninstall reports the CRD it keeps")
	g.Eventually(func() bool {
		err := env.Client.Get(ctx(t), types.NamespacedName{Namespace: releaseNamespace, Name: "mcp-bridge-manager"}, &d)
		return apierrors.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond).Should(BeTrue(), "the Deployment outlives helm uninstall")
	g.Expect(apierrors.IsNotFound(env.Client.Get(ctx(t), types.NamespacedName{Name: "mcp-bridge-manager"}, &rbacv1.ClusterRole{}))).
		To(BeTrue(), "the manager's ClusterRole outlives helm uninstall")
	g.Expect(env.Client.Get(ctx(t), client.ObjectKeyFromObject(crd), crd)).To(Succeed(), "helm uninstall deleted the CRD")
	g.Expect(env.Client.Get(ctx(t), client.ObjectKeyFromObject(toolSets), toolSets)).To(Succeed(), "helm uninstall deleted the CRD")
	g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: "default", Name: "kept"}, &v1alpha1.McpServer{})).
		To(Succeed(), "helm uninstall deleted an McpServer")

	// The kept CRD still carries the release's ownership: installing the
	// release again adopts it instead of failing on an existing object.
	install(t, nil)
	uninstall(t)
}

// installMonitoringCRDs makes monitoring.coreos.com/v1 ServiceMonitor and
// PrometheusRule known to the apiserver, schemaless: the dry run then
// checks their metadata and admission, and the strict decode into
// prometheus-operator's Go types (render_test.go, monitoring_test.go)
// checks their fields.
func installMonitoringCRDs(t *testing.T) {
	t.Helper()
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		installSchemalessCRD(t, "monitoring.coreos.com", kind)
	}
}

func installSchemalessCRD(t *testing.T, group, kind string) {
	t.Helper()
	singular := strings.ToLower(kind)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: singular + "s." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List",
				Plural: singular + "s", Singular: singular},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true)}}}},
		},
	}
	if err := env.Client.Create(ctx(t), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() bool {
		if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(crd), crd); err != nil {
			return false
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond).Should(BeTrue())
	// kubectl's discovery cache learns the new kind on its next run.
	NewWithT(t).Eventually(func() error {
		_, _, err := env.Kubectl(ctx(t), "get", singular+"s", "-A")
		return err
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
}

func ptrTo[T any](v T) *T { return &v }
