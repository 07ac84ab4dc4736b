package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/testcluster"
)

// The chart's release on the node: the README's release name, so that its
// objects are named mcp-bridge-* as a user's are, in namespaces of its own.
// config/default's objects are named mcpbridge-* in mcpbridge-system, so the
// two installs share no namespaced or cluster-scoped object but the CRD.
const (
	chartRelease    = "mcp-bridge"
	chartNS         = "e2e-helm"
	chartToolsNS    = "e2e-helm-tools"
	chartDeployment = chartRelease + "-manager"
	chartUserRole   = chartRelease + "-gateway-user"
	crdName         = "mcpservers.mcpbridge.dev"
	toolSetCRDName  = "mcptoolsets.mcpbridge.dev"
)

// crdNames are the chart's CRDs, which every container deletes at its end.
var crdNames = []string{crdName, toolSetCRDName}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// The chart installed as the README says (helm install into a namespace
// labelled restricted), through bin/chart-release (the Helm SDK; see
// test/chart/cmd/chart-release), with values only for what the node lacks.
// It installs the McpServer CRD, which config/default installs too: like the
// other containers, this one starts and ends without the CRD, so that the
// order of the containers does not matter.
var _ = Describe("The operator installed with the Helm chart", Ordered, func() {
	// manifest is the release's manifest, as `helm get manifest` prints it.
	var manifest string

	BeforeAll(func(ctx SpecContext) {
		Expect(chartReleaseBin()).To(BeAnExistingFile(), "hack/e2e.sh builds bin/chart-release from test/chart")
		Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNS,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
		// Whatever a failed spec left: the release, its namespaces, the CRD.
		DeferCleanup(func(ctx SpecContext) {
			for _, ns := range []string{chartToolsNS, chartNS} {
				Expect(cluster.Kubectl(ctx, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
			}
			Expect(deleteCRDs(ctx, "--ignore-not-found")).Error().NotTo(HaveOccurred())
			// The cluster-scoped objects of a release whose uninstall did
			// not run: the namespace held the release's record.
			Expect(cluster.Kubectl(ctx, "delete", "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings", "--ignore-not-found",
				"-l", "app.kubernetes.io/instance="+chartRelease)).Error().NotTo(HaveOccurred())
		}, NodeTimeout(10*time.Minute))
	})

	// The release's state on a failure, before the cleanup above removes it
	// (the suite's ReportAfterEach runs after that).
	JustAfterEach(func(ctx SpecContext) {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, args := range [][]string{
			{"get", "all,leases,events", "-n", chartNS, "-o", "wide"},
			{"logs", "-n", chartNS, "-l", "app.kubernetes.io/component=manager", "--tail=200", "--prefix"},
		} {
			out, err := cluster.Kubectl(ctx, args...)
			GinkgoWriter.Printf("$ kubectl %s\n%s%v\n", strings.Join(args, " "), out, err)
		}
	})

	It("installs with helm install: the Deployment becomes Available, takes the lease and runs hardened", func(ctx SpecContext) {
		installed := time.Now()
		manifest = chartReleaseRun(ctx, "install", "-values", chartValuesFile(), chartRelease, filepath.Join(cluster.Root(), "charts", "mcp-bridge"))
		Eventually(func(ctx context.Context) error {
			return deploymentAvailableAt(ctx, client.ObjectKey{Namespace: chartNS, Name: chartDeployment})
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("helm install -> Deployment Available", time.Since(installed).Round(time.Millisecond).String())

		pod := readyManagerPodIn(ctx, chartNS)
		Expect(pod.Spec.ServiceAccountName).To(Equal(chartRelease+"-manager"), "the chart's ServiceAccount")
		Eventually(func(ctx context.Context) (string, error) {
			return leaseHolderIn(ctx, chartNS)
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(HavePrefix(pod.Name + "_"))
		expectHardened(pod)

		var crd metav1.PartialObjectMetadata
		crd.SetGroupVersionKind(crdGVK)
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: crdName}, &crd)).To(Succeed())
		Expect(crd.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"), "the release installed the CRD")
	})

	It("makes an HTTP McpServer Ready and serves its tools through the gateway to a token made for mcpbridge.dev only", func(ctx SpecContext) {
		readyFixtureServer(ctx, chartToolsNS, "McpServer create -> Ready (chart's manager)")

		// The agent's role is the chart's gateway-user ClusterRole; its
		// token is made for the gateway's audience alone, so the chart's
		// gateway.tokenAudiences is what accepts it.
		mgr := readyManagerPodIn(ctx, chartNS)
		expectGatewayServes(ctx, mgr, chartToolsNS, roleToken(ctx, chartToolsNS, "agent", chartUserRole, tokenAudience))
		expectGatewayRefuses(ctx, mgr, chartToolsNS, roleToken(ctx, chartToolsNS, "agent", chartUserRole, apiAudience))
		expectGatewayRefusesAnonymous(ctx, mgr, chartToolsNS)

		Expect(cluster.Kubectl(ctx, "delete", "namespace", chartToolsNS, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
	})

	It("uninstalls with helm uninstall: every object of the release is gone but the CRD, which the chart keeps", func(ctx SpecContext) {
		mgr := readyManagerPodIn(ctx, chartNS)
		uninstalled := time.Now()
		kept := chartReleaseRun(ctx, "uninstall", chartRelease)
		Expect(kept).To(ContainSubstring(crdName), "Helm reports the CRD it kept")

		rendered := filepath.Join(GinkgoT().TempDir(), "manifest.yaml")
		Expect(os.WriteFile(rendered, []byte(manifest), 0o644)).To(Succeed())
		Eventually(func(ctx context.Context) ([]string, error) {
			out, err := cluster.Kubectl(ctx, "get", "-f", rendered, "--ignore-not-found", "-o", "name")
			return strings.Fields(out), err
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(
			ConsistOf("customresourcedefinition.apiextensions.k8s.io/"+crdName, "customresourcedefinition.apiextensions.k8s.io/"+toolSetCRDName),
			"only the CRDs are left")
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(mgr.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
		AddReportEntry("helm uninstall -> release's objects and manager processes gone", time.Since(uninstalled).Round(time.Millisecond).String())
		var secrets corev1.SecretList
		Expect(cluster.Client.List(ctx, &secrets, client.InNamespace(chartNS),
			client.MatchingLabels{"owner": "helm", "name": chartRelease})).To(Succeed())
		Expect(secrets.Items).To(BeEmpty(), "the release's record is gone")

		// Back to a cluster without the CRD for the other containers.
		Expect(deleteCRDs(ctx)).Error().NotTo(HaveOccurred())
		Expect(cluster.Kubectl(ctx, "delete", "namespace", chartNS, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: chartNS}, &corev1.Namespace{})).To(
			WithTransform(apierrors.IsNotFound, BeTrue()))
	})
})

// chartValues are the values over the chart's defaults for this node: the
// image that make image built and the suite imported (there is no registry
// to pull from), and the apiserver on the node's address, since without
// kube-proxy the kubernetes Service's ClusterIP does not route. They are
// what test/e2e/config patches into config/default, with its one replica
// (replicas_test.go installs several).
func chartValues() map[string]any {
	repo, tag, _ := strings.Cut(managerImage, ":")
	return map[string]any{
		"replicaCount": 1,
		"image":        map[string]any{"repository": repo, "tag": tag, "pullPolicy": string(corev1.PullNever)},
		"manager": map[string]any{"extraEnv": []corev1.EnvVar{
			{Name: "KUBERNETES_SERVICE_HOST", Value: cluster.NodeIP.String()},
			{Name: "KUBERNETES_SERVICE_PORT", Value: fmt.Sprint(testcluster.APIServerPort)},
		}},
	}
}

// chartValuesFile writes chartValues as JSON (which is YAML) for -values.
func chartValuesFile() string {
	return valuesFile(chartValues())
}

// valuesFile writes values as JSON (which is YAML) for -values.
func valuesFile(values map[string]any) string {
	b, err := json.Marshal(values)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "values.json")
	Expect(os.WriteFile(path, b, 0o644)).To(Succeed())
	return path
}

// deleteCRDs deletes the chart's CRDs, and with them every McpServer and
// McpToolSet, with extra kubectl flags.
func deleteCRDs(ctx context.Context, flags ...string) (string, error) {
	return cluster.Kubectl(ctx, append(append([]string{"delete", "crd"}, crdNames...), append(flags, "--wait=true", "--timeout=3m")...)...)
}

func chartReleaseBin() string { return filepath.Join(cluster.Root(), "bin", "chart-release") }

// chartReleaseRun runs bin/chart-release COMMAND [ARGS] for the release's
// namespace as the admin and returns its standard output.
func chartReleaseRun(ctx context.Context, command string, args ...string) string {
	return chartReleaseRunIn(ctx, chartNS, command, args...)
}

// chartReleaseRunIn runs bin/chart-release COMMAND [ARGS] for a release in
// namespace ns.
func chartReleaseRunIn(ctx context.Context, ns, command string, args ...string) string {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, chartReleaseBin(),
		append([]string{command, "-kubeconfig", cluster.KubeconfigPath, "-namespace", ns}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Run()).To(Succeed(), "chart-release %s: %s", command, stderr.String())
	return stdout.String()
}
