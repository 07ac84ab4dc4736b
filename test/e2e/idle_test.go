package e2e

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/testcluster"
)

// idleNS runs the idle server, under Pod Security "restricted" as podsNS.
const idleNS = "e2e-idle"

// An idle Pod-runtime server on the real node: after suspendAfterMs (its
// floor, 60 s: the spec waits that long) its Deployment is at 0 replicas and
// its Pod is gone; the first call through the gateway scales it back to 1,
// waits for the Pod, and gets its answer.
// See docs/design.md, "Idle servers".
var _ = Describe("Idle servers on a real node", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		install(ctx)
		DeferCleanup(uninstall)
		Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: idleNS,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(cluster.Kubectl(ctx, "delete", "namespace", idleNS, "--wait=true", "--timeout=3m")).Error().NotTo(HaveOccurred())
		})
	}, NodeTimeout(5*time.Minute))

	It("sleeps at 0 replicas with its Pod gone, and the first call through the gateway wakes it to 1 and succeeds", func(ctx SpecContext) {
		server := podServer("fixture")
		server.Namespace = idleNS
		server.Spec.Idle = &v1alpha1.IdlePolicy{SuspendAfterMs: ptr32(60000)}
		Expect(cluster.Client.Create(ctx, server)).To(Succeed())
		Eventually(serverReady(server, 1)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		readyAt := time.Now()
		pod := serverPod(ctx, server)
		token := agentToken(ctx, idleNS, "agent")

		Eventually(func(ctx context.Context) error {
			if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(server), server); err != nil {
				return err
			}
			if server.Status.Phase != v1alpha1.PhaseIdle {
				return fmt.Errorf("phase %s", server.Status.Phase)
			}
			if r := replicasOf(ctx, server); r != 0 {
				return fmt.Errorf("%d replicas", r)
			}
			if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the Pod %s is still there (%v)", pod.Name, err)
			}
			return nil
		}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		AddReportEntry("Ready -> Idle with 0 replicas and the Pod gone (suspendAfterMs 60000)", time.Since(readyAt).Round(time.Millisecond).String())
		Eventually(func() ([]int, error) { return testcluster.PodProcesses(pod.UID) }).
			WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(BeEmpty())
		ready := meta.FindStatusCondition(server.Status.Conditions, v1alpha1.ConditionReady)
		Expect(ready).NotTo(BeNil())
		Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonIdle))
		Expect(server.Status.ToolCount).NotTo(BeZero(), "the sleeping server's tools stay published")
		Expect(cluster.Kubectl(ctx, "get", "mcpservers", "-n", idleNS)).To(MatchRegexp(`\nfixture\s+fixture\s+stdio\s+Idle\s`))

		sess := agentSession(ctx, idleNS, token)
		called := time.Now()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fixture__echo", Arguments: map[string]any{"text": "good morning"}})
		took := time.Since(called)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeFalse(), "%+v", res.Content)
		Expect(res.Content).To(ConsistOf(HaveField("Text", "good morning")))
		AddReportEntry("first call to a sleeping Pod-runtime server", took.Round(time.Millisecond).String())

		Expect(replicasOf(ctx, server)).To(BeEquivalentTo(1))
		Eventually(serverReady(server, 2)).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
		Expect(server.Status.PodName).NotTo(Equal(pod.Name), "woke in a new Pod")
		Expect(cluster.Client.Delete(ctx, server)).To(Succeed())
	})
})

// replicasOf reads the spec.replicas of s's Deployment.
func replicasOf(ctx context.Context, s *v1alpha1.McpServer) int32 {
	GinkgoHelper()
	d := &appsv1.Deployment{}
	Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: podruntime.DeploymentName(s.Name)}, d)).To(Succeed())
	return *d.Spec.Replicas
}

// agentSession connects an agent with token to ns's endpoint at the ready
// manager Pod's gateway; it closes with the spec.
func agentSession(ctx context.Context, ns, token string) *mcp.ClientSession {
	GinkgoHelper()
	agent := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "test"}, nil)
	mgr := readyManagerPod(ctx)
	hc := gatewayClient(ctx, mgr, ns, token)
	var sess *mcp.ClientSession
	Eventually(func(ctx context.Context) (err error) {
		sess, err = agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gatewayEndpoint(mgr, ns), HTTPClient: hc}, nil)
		return err
	}).WithContext(ctx).Within(timeout).ProbeEvery(poll).Should(Succeed())
	DeferCleanup(sess.Close)
	return sess
}
