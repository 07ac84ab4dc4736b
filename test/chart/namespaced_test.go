package chart_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
)

// A namespaced install: with manager.watchNamespaces the manager's RBAC is
// Roles in those namespaces, plus a ClusterRole for TokenReviews and
// SubjectAccessReviews only.

var (
	watched   = []string{"tenant-a", "tenant-b"}
	unwatched = "tenant-c"
)

// TestNamespacedRender: no cluster-wide rule but the reviews, and a Role
// with every other rule of the generated role in each watched namespace.
func TestNamespacedRender(t *testing.T) {
	g := NewWithT(t)
	objs, _ := render(t, map[string]any{"manager": map[string]any{"watchNamespaces": []any{watched[0], watched[1]}}})
	var cr rbacv1.ClusterRole
	fromObj(t, find(t, objs, "ClusterRole", "mcp-bridge-manager"), &cr)
	for _, r := range cr.Rules {
		g.Expect(r.APIGroups).To(HaveEach(BeElementOf("authentication.k8s.io", "authorization.k8s.io")), "cluster-wide rule %v", r)
	}
	g.Expect(cr.Rules).To(HaveLen(2))
	var roles []string
	for _, o := range objs {
		if o.GetKind() == "Role" && o.GetName() == "mcp-bridge-manager" {
			roles = append(roles, o.GetNamespace())
			var r rbacv1.Role
			fromObj(t, o, &r)
			g.Expect(r.Rules).To(ContainElement(HaveField("Resources", ContainElement("secrets"))))
		}
		if o.GetKind() == "RoleBinding" && o.GetName() == "mcp-bridge-manager" {
			var b rbacv1.RoleBinding
			fromObj(t, o, &b)
			g.Expect(b.Subjects).To(ConsistOf(HaveField("Namespace", releaseNamespace)))
		}
	}
	g.Expect(roles).To(ConsistOf(watched))
	// The gateway's CA Secret, in the release's namespace only: create, and
	// read that one Secret.
	var ca rbacv1.Role
	fromObj(t, find(t, objs, "Role", "mcp-bridge-gateway-ca"), &ca)
	g.Expect(ca.Namespace).To(Equal(releaseNamespace))
	g.Expect(ca.Rules).To(ConsistOf(
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"mcpbridge-gateway-ca"}, Verbs: []string{"get"}}))
	find(t, objs, "RoleBinding", "mcp-bridge-gateway-ca")
	// The gateway's session keys and the replicas' CA, in the release's
	// namespace only: create, and read and rotate those two Secrets.
	var keys rbacv1.Role
	fromObj(t, find(t, objs, "Role", "mcp-bridge-session-keys"), &keys)
	g.Expect(keys.Namespace).To(Equal(releaseNamespace))
	g.Expect(keys.Rules).To(ConsistOf(
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"mcpbridge-session-keys", "mcpbridge-replica-ca"},
			Verbs: []string{"get", "update"}}))
	find(t, objs, "RoleBinding", "mcp-bridge-session-keys")
}

// TestNamespacedInstallRunsTheManager installs the chart with two watched
// namespaces and runs the manager binary with the release's arguments and a
// token of the release's ServiceAccount: with exactly that RBAC (and the
// chart's admission policies) it creates the Pod runtime's objects in both
// watched namespaces, never touches the third, and is refused nothing.
func TestNamespacedInstallRunsTheManager(t *testing.T) {
	g := NewWithT(t)
	for _, ns := range append(slices.Clone(watched), unwatched) {
		g.Expect(env.Client.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	rel := install(t, map[string]any{
		"crds":    map[string]any{"install": false}, // envtest installed it
		"manager": map[string]any{"watchNamespaces": []any{watched[0], watched[1]}},
	})
	t.Cleanup(func() { uninstall(t) })
	d := managerOf(t, decode(t, rel.Manifest))
	sa := d.Spec.Template.Spec.ServiceAccountName

	// What the ServiceAccount may do, as RBAC decides it.
	canI := func(args ...string) string {
		out, _, _ := env.Kubectl(ctx(t), append([]string{"auth", "can-i", "--as=system:serviceaccount:" + releaseNamespace + ":" + sa}, args...)...)
		return strings.TrimSpace(out)
	}
	// The authorizer learns of the release's bindings from its informers.
	g.Eventually(func() string { return canI("get", "secrets", "-n", watched[0]) }, 30*time.Second, 100*time.Millisecond).Should(Equal("yes"))
	g.Eventually(func() string { return canI("create", "tokenreviews.authentication.k8s.io") }, 30*time.Second, 100*time.Millisecond).Should(Equal("yes"))
	g.Expect(canI("get", "secrets", "-n", unwatched)).To(Equal("no"))
	g.Expect(canI("list", "secrets", "-A")).To(Equal("no"))
	g.Expect(canI("create", "deployments.apps", "-n", unwatched)).To(Equal("no"))

	logPath := runReleaseManager(t, d, sa)

	servers := map[string]*v1alpha1.McpServer{}
	for _, ns := range append(slices.Clone(watched), unwatched) {
		s := &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Name: "fixture", Namespace: ns},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStdio, Stdio: &v1alpha1.StdioTransport{
				Command: "/mcp-fixture", Image: "mcpbridge.dev/e2e/mcp-fixture:dev"}},
		}
		g.Expect(env.Client.Create(ctx(t), s)).To(Succeed())
		servers[ns] = s
	}
	for _, ns := range watched {
		// The Pod runtime's objects: no kubelet runs the Pod, but the
		// manager made them with its Role, past the manager-writes policy.
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: ns, Name: "fixture-mcp"}, &appsv1.Deployment{})).To(Succeed())
			g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: ns, Name: "fixture-mcp-token"}, &corev1.Secret{})).To(Succeed())
			s := &v1alpha1.McpServer{}
			g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: ns, Name: "fixture"}, s)).To(Succeed())
			g.Expect(s.Status.Runtime).To(Equal(v1alpha1.RuntimePod))
		}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the manager's work in %s", ns)
	}
	// A spec edit rolls the Pod: the manager renews the credentials and
	// patches its Deployment, with the same RBAC and past the same policy.
	edited := servers[watched[0]]
	g.Expect(env.Client.Get(ctx(t), client.ObjectKeyFromObject(edited), edited)).To(Succeed())
	edited.Spec.Stdio.Args = []string{"--server-version=2.0.0"}
	g.Expect(env.Client.Update(ctx(t), edited)).To(Succeed())
	g.Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: watched[0], Name: "fixture-mcp"}, d)).To(Succeed())
		c := d.Spec.Template.Spec.Containers[0] // the shim, then -- and the server's command and args
		g.Expect(append(c.Command, c.Args...)).To(ContainElement("--server-version=2.0.0"))
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the manager rolled the Deployment in %s", watched[0])
	// The gateway's CA: kept in the release's namespace, published in the
	// watched namespaces only.
	var caSecret corev1.Secret
	g.Eventually(func() error {
		return env.Client.Get(ctx(t), types.NamespacedName{Namespace: releaseNamespace, Name: "mcpbridge-gateway-ca"}, &caSecret)
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the gateway's CA Secret")
	for _, ns := range watched {
		g.Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: ns, Name: "mcpbridge-gateway-ca"}, &cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveKeyWithValue("ca.crt", string(caSecret.Data["tls.crt"])))
		}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the gateway's CA published in %s", ns)
	}
	g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: unwatched, Name: "mcpbridge-gateway-ca"}, &corev1.ConfigMap{})).
		To(MatchError(ContainSubstring("not found")))
	// Both watched namespaces are done; the third was never looked at.
	c := &v1alpha1.McpServer{}
	g.Expect(env.Client.Get(ctx(t), types.NamespacedName{Namespace: unwatched, Name: "fixture"}, c)).To(Succeed())
	g.Expect(c.Status.Runtime).To(BeEmpty())
	g.Expect(c.Status.ObservedGeneration).To(BeEquivalentTo(-1), "the CRD's default, unwritten")
	err := env.Client.Get(ctx(t), types.NamespacedName{Namespace: unwatched, Name: "fixture-mcp"}, &appsv1.Deployment{})
	g.Expect(err).To(HaveOccurred())

	log, err := os.ReadFile(logPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.ToLower(string(log))).NotTo(ContainSubstring("forbidden"), "the manager was refused something")
	for _, s := range servers {
		g.Expect(env.Client.Delete(ctx(t), s)).To(Succeed())
	}
}

// runReleaseManager builds and runs the manager with d's arguments (loopback
// addresses instead of the Pod's) and a kubeconfig holding only a token of
// the release's ServiceAccount sa, waits for it to be ready, and stops it
// when the test ends. It returns the path of the manager's log.
func runReleaseManager(t *testing.T, d *appsv1.Deployment, sa string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	if err := testenv.Build(bin, "./cmd/manager"); err != nil {
		t.Fatal(err)
	}
	probes := freeAddr(t)
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + freeAddr(t)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + probes
		case strings.HasPrefix(a, "--gateway-bind-address="):
			a = "--gateway-bind-address=" + freeAddr(t)
		}
		args = append(args, a)
	}
	// Out of a cluster the manager cannot know its namespace.
	args = append(args, "--leader-election-namespace="+releaseNamespace, "--manager-namespace="+releaseNamespace, "--kubeconfig="+tokenKubeconfig(t, releaseNamespace, sa))

	logPath, exited := runManager(t, bin, []string{"KUBECONFIG=" + filepath.Join(dir, "no-such-kubeconfig"), "HOME=" + dir}, args...)
	hc := &http.Client{Timeout: time.Second}
	NewWithT(t).Eventually(func(g Gomega) {
		select {
		case err := <-exited:
			exited <- err
			StopTrying(fmt.Sprintf("the manager exited at start-up: %v", err)).Now()
		default:
		}
		resp, err := hc.Get("http://" + probes + "/readyz")
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the manager is not ready")
	return logPath
}

// tokenKubeconfig writes a kubeconfig that reaches the control plane with a
// token of ServiceAccount ns/sa only.
func tokenKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	out, _, err := env.Kubectl(ctx(t), "-n", ns, "create", "token", sa, "--duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(out)}
	kc.Contexts["manager"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: sa}
	kc.CurrentContext = "manager"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// decode splits a release's manifest into objects.
func decode(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeManifests(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// fromObj converts a rendered object into its Go type.
func fromObj(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatal(err)
	}
}
