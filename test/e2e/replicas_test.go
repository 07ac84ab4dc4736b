package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// The chart installed with three replicas, in namespaces of its own and
// under a release name of its own, so that it shares nothing with the other
// containers but the CRD, which it removes at the end as they do.
const (
	haRelease    = "mcp-bridge-ha"
	haNS         = "e2e-ha"
	haToolsNS    = "e2e-ha-tools"
	haReplicas   = 3
	haDeployment = haRelease + "-manager"
	haGateway    = haRelease + "-gateway"
	// sessionKeysSecret is the Secret with the key that seals 2025-11-25
	// sessions for every replica (docs/design.md, "Replicas and
	// ownership").
	sessionKeysSecret = "mcpbridge-session-keys"
)

// Agents reach the replicas only through the gateway Service, as a Service
// would send them (serviceBalancer), and call Streamable HTTP and Pod-runtime
// stdio servers without pause over both protocol versions while the
// Deployment rolls and while one replica is killed. See docs/design.md,
// "Replicas and ownership".
var _ = Describe("Manager replicas under agents calling without pause (the chart with 3 replicas)", Ordered, func() {
	var (
		servers     []*v1alpha1.McpServer
		tools       []string
		sessionless *agent
		session     *agent
		endSession  func()
		balancer    *serviceBalancer
	)

	BeforeAll(func(ctx SpecContext) {
		Expect(chartReleaseBin()).To(BeAnExistingFile(), "hack/e2e.sh builds bin/chart-release from test/chart")
		for _, ns := range []string{haNS, haToolsNS} {
			Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
				Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
		}
		balancerCtx, stopBalancer := context.WithCancel(context.Background())
		DeferCleanup(func(ctx SpecContext) {
			for _, a := range []*agent{sessionless, session} {
				if a != nil {
					a.halt()
				}
			}
			if endSession != nil {
				endSession()
			}
			stopBalancer()
			// The servers' namespace first, while the manager still runs to
			// finalize its McpServers; then the release's.
			for _, ns := range []string{haToolsNS, haNS} {
				Expect(cluster.Kubectl(ctx, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
			}
			Expect(deleteCRDs(ctx, "--ignore-not-found")).Error().NotTo(HaveOccurred())
			Expect(cluster.Kubectl(ctx, "delete", "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings", "--ignore-not-found",
				"-l", "app.kubernetes.io/instance="+haRelease)).Error().NotTo(HaveOccurred())
		}, NodeTimeout(10*time.Minute))

		values := chartValues()
		values["replicaCount"] = haReplicas
		installed := time.Now()
		chartReleaseRunIn(ctx, haNS, "install", "-values", valuesFile(values), haRelease, filepath.Join(cluster.Root(), "charts", "mcp-bridge"))
		Eventually(func(ctx context.Context) error {
			return deploymentAvailableAt(ctx, client.ObjectKey{Namespace: haNS, Name: haDeployment})
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("helm install (3 replicas) -> Deployment Available", time.Since(installed).Round(time.Millisecond).String())
		balancer = startServiceBalancer(balancerCtx, haNS, haGateway, gatewayPort)
	}, NodeTimeout(10*time.Minute))

	JustAfterEach(func(ctx SpecContext) {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, args := range [][]string{
			{"get", "pods,leases,endpointslices,events", "-n", haNS, "-o", "wide"},
			{"get", "mcpservers,pods", "-n", haToolsNS, "-o", "wide"},
			{"logs", "-n", haNS, "-l", "app.kubernetes.io/component=manager", "--tail=100", "--prefix"},
		} {
			out, err := cluster.Kubectl(ctx, args...)
			GinkgoWriter.Printf("$ kubectl %s\n%s%v\n", strings.Join(args, " "), out, err)
		}
	})

	It("spreads Streamable HTTP and Pod-runtime servers over the replicas, each replica lists every tool, and calls through the Service succeed", func(ctx SpecContext) {
		url := startFixturePod(ctx, haToolsNS)
		for i := range 4 {
			servers = append(servers, &v1alpha1.McpServer{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("http-%d", i), Namespace: haToolsNS},
				Spec: v1alpha1.McpServerSpec{Transport: v1alpha1.TransportStreamableHTTP,
					StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: url}},
			})
		}
		for i := range 2 {
			s := podServer(fmt.Sprintf("stdio-%d", i))
			s.Namespace = haToolsNS
			servers = append(servers, s)
		}
		created := time.Now()
		for _, s := range servers {
			Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		}
		for _, s := range servers {
			Eventually(serverReady(s, 0)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		}
		AddReportEntry("6 McpServers created -> all Ready", time.Since(created).Round(time.Millisecond).String())

		pods := managerPods(ctx)
		Expect(pods).To(HaveLen(haReplicas))
		owners := map[string][]string{}
		for _, s := range servers {
			Expect(pods).To(HaveKey(s.Status.Replica), "%s is owned by a running replica", s.Name)
			owners[s.Status.Replica] = append(owners[s.Status.Replica], s.Name)
		}
		AddReportEntry("owners", fmt.Sprint(owners))

		token := roleToken(ctx, haToolsNS, "agent", haRelease+"-gateway-user", tokenAudience)
		for _, pod := range pods {
			names := listedTools(ctx, pod, haToolsNS, token)
			echoes := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !strings.HasSuffix(n, "__echo") })
			Expect(echoes).To(HaveLen(len(servers)), "replica %s lists every server's echo: %v", pod.Name, names)
			if tools == nil {
				tools = echoes
			}
			Expect(echoes).To(ConsistOf(tools), "replica %s lists the same tools", pod.Name)
		}

		// Two agents, each with connections of its own.
		sessionless = startAgent("sessionless", sessionlessCaller(balancer, balancer.httpClient(ctx, haToolsNS, token), balancer.url(haToolsNS), tools))
		var call callFunc
		call, endSession = sessionCaller(balancer.httpClient(ctx, haToolsNS, token), balancer.url(haToolsNS), tools)
		session = startAgent("session", call)
		expectCallsOfEveryTool(ctx, len(tools), sessionless, session)
		for _, a := range []*agent{sessionless, session} {
			f := a.phase()
			AddReportEntry("steady: "+a.name+" agent", f.String())
			Expect(f.failed).To(BeZero(), "%s agent: %v", a.name, f.failures)
		}
	})

	It("rolls the Deployment (kubectl rollout restart) without a failed call", func(ctx SpecContext) {
		refusedBefore := balancer.refusedDials()
		restarted := time.Now()
		Expect(cluster.Kubectl(ctx, "rollout", "restart", "-n", haNS, "deployment/"+haDeployment)).Error().NotTo(HaveOccurred())
		Expect(cluster.Kubectl(ctx, "rollout", "status", "-n", haNS, "deployment/"+haDeployment, "--timeout=10m")).Error().NotTo(HaveOccurred())
		AddReportEntry("rollout restart -> rollout complete", time.Since(restarted).Round(time.Millisecond).String())
		expectCallsOfEveryTool(ctx, len(tools), sessionless, session)

		sealed := sessionKeysExist(ctx)
		AddReportEntry("rollout: dials to a listed endpoint refused and retried elsewhere", balancer.refusedDials()-refusedBefore)
		for _, a := range []*agent{sessionless, session} {
			f := a.phase()
			AddReportEntry("rollout: "+a.name+" agent", f.String())
			// No call fails (docs/design.md, "Replicas and ownership").
			Expect(f.failed).To(BeZero(), "%s agent: %v", a.name, f.failures)
			// Sessions survive a replica only when every replica can open
			// them: with the sealing key's Secret in the manager's
			// namespace.
			if sealed {
				Expect(f.newSessions).To(BeZero(), "%s agent opened new sessions", a.name)
			}
		}
		AddReportEntry("rollout: new sessions asserted (session key Secret present)", sealed)
	})

	It("loses only the calls in flight on a manager Pod deleted with --grace-period=0 --force; its servers are Ready on the other replicas, the others untouched", func(ctx SpecContext) {
		pods := managerPods(ctx)
		Expect(pods).To(HaveLen(haReplicas))
		var moved, kept []*v1alpha1.McpServer
		byOwner := map[string]int{}
		for _, s := range servers {
			Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			byOwner[s.Status.Replica]++
		}
		victim := ""
		for name := range pods {
			if victim == "" || byOwner[name] > byOwner[victim] {
				victim = name
			}
		}
		Expect(byOwner[victim]).NotTo(BeZero(), "some replica owns a server")
		for _, s := range servers {
			if s.Status.Replica == victim {
				moved = append(moved, s.DeepCopy())
			} else {
				kept = append(kept, s.DeepCopy())
			}
		}
		sessionless.phase()
		session.phase()

		killed := time.Now()
		Expect(cluster.Kubectl(ctx, "delete", "pod", "-n", haNS, victim, "--grace-period=0", "--force")).Error().NotTo(HaveOccurred())
		for _, s := range moved {
			Eventually(func(g Gomega, ctx context.Context) {
				g.Expect(serverReady(s, 0)(ctx)).To(Succeed())
				g.Expect(s.Status.Replica).NotTo(Or(BeEmpty(), Equal(victim)), "%s has a new owner", s.Name)
			}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		}
		AddReportEntry(fmt.Sprintf("owner deleted with --force -> its %d servers Ready on other replicas", len(moved)),
			time.Since(killed).Round(time.Millisecond).String())
		expectCallsOfEveryTool(ctx, len(tools), sessionless, session)

		// The Deployment's replacement for the deleted Pod joins and takes
		// its share, which may include kept servers: those move to it, and
		// to no replica that was there before.
		for _, s := range kept {
			now := &v1alpha1.McpServer{}
			Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(s), now)).To(Succeed())
			if _, existed := pods[now.Status.Replica]; !existed {
				continue
			}
			Expect(now.Status.Replica).To(Equal(s.Status.Replica), "%s keeps its owner", s.Name)
			Expect(now.Status.ConnectionGeneration).To(Equal(s.Status.ConnectionGeneration), "%s keeps its connection", s.Name)
		}
		for _, a := range []*agent{sessionless, session} {
			f := a.phase()
			AddReportEntry("owner killed: "+a.name+" agent", f.String())
			// Each agent makes one call at a time: at most that one was in
			// flight on the killed replica.
			Expect(f.failed).To(BeNumerically("<=", 1), "%s agent: %v", a.name, f.failures)
		}
		Eventually(func(ctx context.Context) error {
			return deploymentAvailableAt(ctx, client.ObjectKey{Namespace: haNS, Name: haDeployment})
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	})
})

// managerPods are the release's Ready, not terminating manager Pods by name.
func managerPods(ctx context.Context) map[string]*corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(cluster.Client.List(ctx, &pods, client.InNamespace(haNS),
		client.MatchingLabels{"app.kubernetes.io/component": "manager"})).To(Succeed())
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			out[p.Name] = p
		}
	}
	return out
}

// listedTools are the tools the gateway of manager Pod mgr lists in ns.
func listedTools(ctx context.Context, mgr *corev1.Pod, ns, token string) []string {
	GinkgoHelper()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-lister", Version: "test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: gatewayEndpoint(mgr, ns), HTTPClient: gatewayClient(ctx, mgr, ns, token)}, nil)
	Expect(err).NotTo(HaveOccurred())
	defer sess.Close()
	var names []string
	for tool, err := range sess.Tools(ctx, nil) {
		Expect(err).NotTo(HaveOccurred())
		names = append(names, tool.Name)
	}
	return names
}

// expectCallsOfEveryTool waits until each agent has called every tool
// successfully twice more from now.
func expectCallsOfEveryTool(ctx context.Context, tools int, agents ...*agent) {
	GinkgoHelper()
	for _, a := range agents {
		Eventually(a.succeeded).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(
			BeNumerically(">=", a.succeeded()+2*tools), "%s agent's successful calls", a.name)
	}
}

// sessionKeysExist tells whether the manager keeps the key that seals
// sessions for every replica.
func sessionKeysExist(ctx context.Context) bool {
	GinkgoHelper()
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: haNS, Name: sessionKeysSecret}, &corev1.Secret{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}
