package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// A namespaced install: the chart with manager.watchNamespaces, a release
// of its own (objects named mcp-bridge-ns-*), two watched namespaces and
// one that is not.
const (
	nsRelease   = "mcp-bridge-ns"
	nsReleaseNS = "e2e-helm-ns"
)

var (
	nsWatched   = []string{"e2e-watched-a", "e2e-watched-b"}
	nsUnwatched = "e2e-unwatched"
)

var _ = Describe("The operator installed for some namespaces only (manager.watchNamespaces)", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		Expect(chartReleaseBin()).To(BeAnExistingFile(), "hack/e2e.sh builds bin/chart-release from test/chart")
		DeferCleanup(func(ctx SpecContext) {
			_, _ = cluster.Kubectl(ctx, "delete", "mcpservers", "--all", "-A", "--wait=true", "--timeout=2m")
			for _, ns := range append(append([]string{nsReleaseNS}, nsWatched...), nsUnwatched) {
				Expect(cluster.Kubectl(ctx, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
			}
			Expect(deleteCRDs(ctx, "--ignore-not-found")).Error().NotTo(HaveOccurred())
			Expect(cluster.Kubectl(ctx, "delete", "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings", "--ignore-not-found",
				"-l", "app.kubernetes.io/instance="+nsRelease)).Error().NotTo(HaveOccurred())
		}, NodeTimeout(10*time.Minute))
		// The Roles go into the watched namespaces, which must exist first.
		for _, ns := range append(append([]string{nsReleaseNS}, nsWatched...), nsUnwatched) {
			Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
	})

	JustAfterEach(func(ctx SpecContext) {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, args := range [][]string{
			{"get", "all,roles,rolebindings,configmaps,events", "-n", nsReleaseNS, "-o", "wide"},
			{"logs", "-n", nsReleaseNS, "-l", "app.kubernetes.io/component=manager", "--tail=200", "--prefix"},
		} {
			out, err := cluster.Kubectl(ctx, args...)
			GinkgoWriter.Printf("$ kubectl %s\n%s%v\n", strings.Join(args, " "), out, err)
		}
	})

	It("serves the watched namespaces' servers through the gateway, ignores the other's, and holds no cluster-wide Secret, Deployment or Pod right", func(ctx SpecContext) {
		values := chartValues()
		values["manager"].(map[string]any)["watchNamespaces"] = nsWatched
		// Without cluster-wide list of Pods the in-cluster lookup cannot
		// place the fixtures' Pod IPs: the Pod network is allowed instead
		// (README, "Security model").
		values["egress"] = map[string]any{"upstreamAllowCIDRs": []string{"10.244.0.0/16"}}
		chartReleaseRunIn(ctx, nsReleaseNS, "install", "-values", valuesFile(values), nsRelease, filepath.Join(cluster.Root(), "charts", "mcp-bridge"))
		Eventually(func(ctx context.Context) error {
			return deploymentAvailableAt(ctx, client.ObjectKey{Namespace: nsReleaseNS, Name: nsRelease + "-manager"})
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		mgr := readyManagerPodIn(ctx, nsReleaseNS)

		// RBAC: the reviews cluster-wide, nothing else.
		var cr rbacv1.ClusterRole
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: nsRelease + "-manager"}, &cr)).To(Succeed())
		for _, r := range cr.Rules {
			Expect(r.Resources).NotTo(ContainElements(BeElementOf("secrets", "deployments", "pods")), "cluster-wide rule %v", r)
		}
		as := "--as=system:serviceaccount:" + nsReleaseNS + ":" + mgr.Spec.ServiceAccountName
		canI := func(args ...string) string {
			out, _ := cluster.Kubectl(ctx, append([]string{"auth", "can-i", as}, args...)...)
			return strings.TrimSpace(out)
		}
		for _, verbResource := range [][]string{{"list", "secrets"}, {"list", "deployments.apps"}, {"list", "pods"}} {
			Expect(canI(append(verbResource, "-A")...)).To(Equal("no"), "%s cluster-wide", verbResource)
			Expect(canI(append(verbResource, "-n", nsUnwatched)...)).To(Equal("no"), "%s in %s", verbResource, nsUnwatched)
			Expect(canI(append(verbResource, "-n", nsWatched[0])...)).To(Equal("yes"), "%s in %s", verbResource, nsWatched[0])
		}

		// The unwatched server first: by the time the watched ones are
		// Ready and callable, the manager has had every chance to touch it.
		ignored := &v1alpha1.McpServer{
			ObjectMeta: metav1.ObjectMeta{Name: "fixture", Namespace: nsUnwatched},
			Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
				StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: startFixturePod(ctx, nsUnwatched)}},
		}
		Expect(cluster.Client.Create(ctx, ignored)).To(Succeed())
		for _, ns := range nsWatched {
			s := &v1alpha1.McpServer{
				ObjectMeta: metav1.ObjectMeta{Name: "fixture", Namespace: ns},
				Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
					StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: startFixturePod(ctx, ns)}},
			}
			Expect(cluster.Client.Create(ctx, s)).To(Succeed())
			Eventually(serverReady(s, 0)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
			expectGatewayServes(ctx, mgr, ns, roleToken(ctx, ns, "agent", nsRelease+"-gateway-user", tokenAudience))
		}

		Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(ignored), ignored)).To(Succeed())
		Expect(ignored.Status.Phase).To(BeEmpty(), "the unwatched namespace's server has no status written")
		Expect(ignored.Status.ObservedGeneration).To(BeEquivalentTo(-1), "the CRD's default, unwritten")
		Expect(ignored.Status.Conditions).To(BeEmpty())
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: nsUnwatched, Name: gatewayCAConfigMap}, &corev1.ConfigMap{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no gateway CA published in the unwatched namespace: %v", err)

		chartReleaseRunIn(ctx, nsReleaseNS, "uninstall", nsRelease)
	})
})
