package chart_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestGeneratedCopiesAreCurrent checks the chart's copies of generated
// files against config/, which `make manifests` writes both of.
func TestGeneratedCopiesAreCurrent(t *testing.T) {
	for copyPath, source := range map[string]string{
		"files/crds/mcpbridge.dev_mcpservers.yaml":      "config/crd/bases/mcpbridge.dev_mcpservers.yaml",
		"files/crds/mcpbridge.dev_mcptoolsets.yaml":     "config/crd/bases/mcpbridge.dev_mcptoolsets.yaml",
		"files/rbac/manager-role.yaml":                  "config/rbac/role.yaml",
		"files/admission/author_references_policy.yaml": "config/admission/author_references_policy.yaml",
		"files/admission/manager_writes_policy.yaml":    "config/admission/manager_writes_policy.yaml",
		"files/argocd/health.lua":                       "config/argocd/health.lua",
		"files/argocd/argocd-cm.yaml":                   "config/argocd/argocd-cm.yaml",
	} {
		got, err := os.ReadFile(filepath.Join(chartDir(), copyPath))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, source))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/mcp-bridge/%s differs from %s: run `make manifests`", copyPath, source)
		}
	}
}

// TestChartMatchesConfigDefault renders the chart with its defaults and
// config/default (`make deploy`) and compares what must not drift apart:
// the CRD, every RBAC rule and binding, and the manager's pod.
func TestChartMatchesConfigDefault(t *testing.T) {
	chartObjs, _ := render(t, nil)
	kustomized, err := env.Kustomize(ctx(t), filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("CRD", func(t *testing.T) {
		// Helm's fromYaml and toYaml go through JSON: numbers and every
		// field must come out as they went in.
		got := find(t, chartObjs, "CustomResourceDefinition", "mcpservers.mcpbridge.dev")
		want := find(t, kustomized, "CustomResourceDefinition", "mcpservers.mcpbridge.dev")
		NewWithT(t).Expect(got.Object["spec"]).To(Equal(want.Object["spec"]))
	})

	t.Run("RBAC", func(t *testing.T) {
		g := NewWithT(t)
		// Roles pair up by what their name ends in; the prefixes differ
		// (mcpbridge- from kustomize, the release's name from Helm).
		chartRoles, kustRoles := roles(t, chartObjs), roles(t, kustomized)
		g.Expect(keys(chartRoles)).To(ConsistOf(keys(kustRoles)))
		for k, want := range kustRoles {
			g.Expect(chartRoles[k].rules).To(Equal(want.rules), "rules of %s", k)
		}
		g.Expect(bindings(t, chartObjs, chartRoles)).To(Equal(bindings(t, kustomized, kustRoles)))
	})

	t.Run("admission policies", func(t *testing.T) {
		g := NewWithT(t)
		for _, name := range []string{"author-references", "manager-writes"} {
			got := find(t, chartObjs, "ValidatingAdmissionPolicy", "mcp-bridge-"+name)
			want := find(t, kustomized, "ValidatingAdmissionPolicy", "mcpbridge-"+name)
			g.Expect(withManagerAs(t, got, chartObjs)).To(Equal(withManagerAs(t, want, kustomized)), name)
			gotB := find(t, chartObjs, "ValidatingAdmissionPolicyBinding", "mcp-bridge-"+name)
			wantB := find(t, kustomized, "ValidatingAdmissionPolicyBinding", "mcpbridge-"+name)
			g.Expect(gotB.Object["spec"]).To(HaveKeyWithValue("policyName", "mcp-bridge-"+name))
			g.Expect(wantB.Object["spec"]).To(HaveKeyWithValue("policyName", "mcpbridge-"+name))
			g.Expect(gotB.Object["spec"]).To(HaveKeyWithValue("validationActions", wantB.Object["spec"].(map[string]any)["validationActions"]))
		}
	})

	t.Run("manager pod", func(t *testing.T) {
		g := NewWithT(t)
		got, want := managerOf(t, chartObjs), managerOf(t, kustomized)
		g.Expect(got.Spec.Strategy).To(Equal(want.Spec.Strategy))
		g.Expect(got.Spec.Replicas).To(Equal(want.Spec.Replicas))
		g.Expect(spreadOf(t, got)).To(Equal(spreadOf(t, want)))
		gp, wp := got.Spec.Template.Spec, want.Spec.Template.Spec
		g.Expect(gp.SecurityContext).To(Equal(wp.SecurityContext))
		g.Expect(gp.TerminationGracePeriodSeconds).To(Equal(wp.TerminationGracePeriodSeconds))
		g.Expect(gp.Volumes).To(Equal(wp.Volumes))
		gc, wc := gp.Containers[0], wp.Containers[0]
		g.Expect(gc.Name).To(Equal(wc.Name))
		// Both give the server Pods the shim from the image they deploy.
		g.Expect(gc.Args).To(ContainElement("--shim-image="+gc.Image), "the chart's --shim-image")
		g.Expect(wc.Args).To(ContainElement("--shim-image="+wc.Image), "config/default's --shim-image")
		// The gateway certificate's names are each install's Service's:
		// the chart names them, config/default has the manager derive them
		// from its namespace (render_test.go and test/manager check both).
		g.Expect(withoutDNSNames(withoutImage(gc.Args, gc.Image))).To(Equal(withoutImage(wc.Args, wc.Image)))
		g.Expect(gc.Ports).To(Equal(wc.Ports))
		g.Expect(gc.SecurityContext).To(Equal(wc.SecurityContext))
		g.Expect(gc.LivenessProbe).To(Equal(wc.LivenessProbe))
		g.Expect(gc.ReadinessProbe).To(Equal(wc.ReadinessProbe))
		g.Expect(gc.Resources).To(Equal(wc.Resources))
		g.Expect(gc.VolumeMounts).To(Equal(wc.VolumeMounts))
		g.Expect(gc.Env).To(Equal(wc.Env))
	})

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		g := NewWithT(t)
		got, want := disruptionBudget(t, chartObjs), disruptionBudget(t, kustomized)
		g.Expect(got).NotTo(BeNil())
		g.Expect(want).NotTo(BeNil())
		g.Expect(got.Spec.MaxUnavailable).To(Equal(want.Spec.MaxUnavailable))
		g.Expect(got.Spec.MinAvailable).To(Equal(want.Spec.MinAvailable))
		g.Expect(got.Spec.Selector).To(Equal(managerOf(t, chartObjs).Spec.Selector))
		g.Expect(want.Spec.Selector).To(Equal(managerOf(t, kustomized).Spec.Selector))
	})

	t.Run("Services", func(t *testing.T) {
		g := NewWithT(t)
		for _, suffix := range []string{"gateway", "metrics"} {
			got := service(t, chartObjs, "mcp-bridge-"+suffix)
			want := service(t, kustomized, "mcpbridge-"+suffix)
			g.Expect(got.Spec.Ports).To(Equal(want.Spec.Ports), "ports of the %s Service", suffix)
			g.Expect(serviceType(got)).To(Equal(serviceType(want)), "type of the %s Service", suffix)
		}
	})
}

// role is a Role or ClusterRole by the part of its name after the prefix.
type role struct {
	name  string
	rules []rbacv1.PolicyRule
}

func roles(t *testing.T, objs []*unstructured.Unstructured) map[string]role {
	t.Helper()
	out := map[string]role{}
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		var r rbacv1.ClusterRole // a Role's fields are a subset
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		out[o.GetKind()+"/"+roleKey(o.GetName())] = role{name: o.GetName(), rules: r.Rules}
	}
	return out
}

// roleKey strips the name prefix and kustomize's -role suffix:
// mcpbridge-manager-role and mcp-bridge-manager are both "manager".
func roleKey(name string) string {
	for _, k := range []string{"manager", "leader-election", "gateway-user", "metrics-reader"} {
		if strings.HasSuffix(name, "-"+k) || strings.HasSuffix(name, "-"+k+"-role") {
			return k
		}
	}
	return name
}

// bindings describes each RoleBinding and ClusterRoleBinding as
// "kind -> role key: subjects", with the manager's ServiceAccount and
// namespace written as placeholders so that both renders compare.
func bindings(t *testing.T, objs []*unstructured.Unstructured, rs map[string]role) []string {
	t.Helper()
	d := managerOf(t, objs)
	sa, ns := d.Spec.Template.Spec.ServiceAccountName, d.Namespace
	var out []string
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatal(err)
		}
		if o.GetKind() == "RoleBinding" && b.Namespace != ns {
			t.Errorf("%s is in %q, the manager in %q", b.Name, b.Namespace, ns)
		}
		key := b.RoleRef.Kind + "/" + roleKey(b.RoleRef.Name)
		if r, ok := rs[key]; !ok || r.name != b.RoleRef.Name {
			t.Errorf("%s %s binds %s %s, which the render lacks", o.GetKind(), b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		s := o.GetKind() + " -> " + key + ":"
		for _, sub := range b.Subjects {
			name, subNS := sub.Name, sub.Namespace
			if name == sa {
				name = "<manager>"
			}
			if subNS == ns {
				subNS = "<namespace>"
			}
			s += " " + sub.Kind + "/" + subNS + "/" + name
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func keys(m map[string]role) []string {
	return slices.Sorted(maps.Keys(m))
}

// serviceType is the Service's type as the apiserver defaults it.
func serviceType(svc *corev1.Service) corev1.ServiceType {
	if svc.Spec.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return svc.Spec.Type
}

// withoutImage writes the container's own image as IMAGE in args: the
// chart and config/default deploy different image names.
func withoutImage(args []string, image string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, image, "IMAGE")
	}
	return out
}

// withoutDNSNames drops --gateway-dns-names.
func withoutDNSNames(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--gateway-dns-names=") })
}

// withManagerAs is the policy's spec with the match condition that names
// the render's manager ServiceAccount written as <manager>: each render
// must name its own, in whatever form its tool writes it.
func withManagerAs(t *testing.T, policy *unstructured.Unstructured, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	d := managerOf(t, objs)
	user := "system:serviceaccount:" + d.Namespace + ":" + d.Spec.Template.Spec.ServiceAccountName
	spec := runtime.DeepCopyJSON(policy.Object)["spec"].(map[string]any)
	conds, _ := spec["matchConditions"].([]any)
	for _, c := range conds {
		c := c.(map[string]any)
		if c["name"] != "manager" {
			continue
		}
		// config/default's replacement leaves the name in pieces.
		expr := strings.NewReplacer("' + '", "", "' + ':' + '", ":").Replace(c["expression"].(string))
		if !strings.Contains(expr, "'"+user+"'") {
			t.Errorf("%s matches %q, not the manager %s", policy.GetName(), c["expression"], user)
		}
		c["expression"] = strings.ReplaceAll(expr, user, "<manager>")
	}
	return spec
}
