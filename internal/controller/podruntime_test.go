package controller_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

// The Pod runtime against a real apiserver. envtest runs no kubelet and no
// controller-manager: the specs create the server's Pod object themselves
// (with the labels and template hash of its Deployment), set its status as
// the kubelet would, and run the real shim as a process on loopback, whose
// port the manager is given, so that a "Ready Pod" at 127.0.0.1 is a real
// tunnel to the real fixture.
// See docs/design.md, "Runtimes for stdio servers".
var _ = Describe("The Pod runtime", Ordered, func() {
	var (
		trusted  string // the one namespace that may run Local
		shimBin  string
		shimPort int
	)

	BeforeAll(func() {
		shimBin = filepath.Join(GinkgoT().TempDir(), "shim")
		Expect(testenv.Build(shimBin, "./cmd/shim")).To(Succeed())
		shimPort = freePort()
		trusted = newNamespace()
		stopManager()
		startManagerWith(policy.RuntimeConfig{LocalNamespaces: []string{trusted}},
			podruntime.Options{ShimImage: testShimImage, Port: int32(shimPort)})
	})
	AfterAll(func() {
		stopManager()
		startManager()
	})

	It("creates the token Secret and the Deployment, owned by the McpServer, and waits for its Pod without burning attempts", func(ctx SpecContext) {
		ns := podNamespace()
		obj := podServer(ns, "fx")
		Expect(k8s.Create(ctx, obj)).To(Succeed())

		d := deploymentOf(ns, "fx")
		owner := metav1.GetControllerOf(d)
		Expect(owner).NotTo(BeNil())
		Expect(owner.UID).To(Equal(get(ns, "fx").UID))
		Expect(d.Labels).To(Equal(podruntime.Labels("fx")))
		Expect(d.Spec.Template.Spec.InitContainers[0].Image).To(Equal(testShimImage))
		Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/fixture:1"))
		s := tokenSecretOf(ns, "fx")
		Expect(metav1.GetControllerOf(s).UID).To(Equal(owner.UID))
		Expect(s.Data[podruntime.TokenKey]).To(HaveLen(43))

		waiting := func(words string) func(Gomega) {
			return func(g Gomega) {
				got := get(ns, "fx")
				g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseConnecting))
				g.Expect(got.Status.Runtime).To(Equal(v1alpha1.RuntimePod))
				g.Expect(got.Status.LastError).NotTo(BeNil())
				g.Expect(got.Status.LastError.Stage).To(Equal("pod"))
				g.Expect(got.Status.LastError.Message).To(Equal(words))
				g.Expect(got.Status.FailedAttempts).To(BeZero())
			}
		}
		Eventually(waiting("No Pod of the current template yet"), eventuallyTimeout, poll).Should(Succeed())

		pod := createPod(ns, "fx", d)
		setPodStatus(pod, corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{waitingStatus(podruntime.InstallShimContainer, "PodInitializing", "")},
			ContainerStatuses: []corev1.ContainerStatus{waitingStatus(podruntime.ServerContainer, "ImagePullBackOff",
				`Back-off pulling image "example.com/fixture:1"`)}})
		Eventually(waiting(`ImagePullBackOff: Back-off pulling image "example.com/fixture:1"`), eventuallyTimeout, poll).Should(Succeed())
		Expect(get(ns, "fx").Status.PodName).To(Equal(pod.Name))
		Consistently(waiting(`ImagePullBackOff: Back-off pulling image "example.com/fixture:1"`), time.Second, poll).Should(Succeed())

		setPodStatus(pod, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/1 nodes are available: 1 Insufficient memory."}}})
		Eventually(waiting("Unschedulable: 0/1 nodes are available: 1 Insufficient memory."), eventuallyTimeout, poll).Should(Succeed())
	})

	It("ends a Pod that never comes up in ReconnectExhausted, one attempt per connectionTimeoutMs of waiting", func(ctx SpecContext) {
		ns := podNamespace()
		obj := podServer(ns, "stuck")
		obj.Spec.ConnectionTimeoutMs = ptr32(300)
		obj.Spec.Reconnect.MaxAttempts = ptr32(2)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		pod := createPod(ns, "stuck", deploymentOf(ns, "stuck"))
		setPodStatus(pod, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			waitingStatus(podruntime.ServerContainer, "ErrImagePull", "not found")}})
		Eventually(phaseOf(ns, "stuck"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseFailed))
		got := get(ns, "stuck")
		Expect(got.Status.FailedAttempts).To(BeEquivalentTo(2))
		Expect(meta(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconnectExhausted))
		Expect(got.Status.LastError.Stage).To(Equal("pod"))
		Expect(got.Status.LastError.Message).To(Equal("the server's Pod was not Ready after 300ms (connectionTimeoutMs): ErrImagePull: not found"))
	})

	It("connects through the shim once the Pod is Ready, and recovers from a deleted Pod with identical tools", func(ctx SpecContext) {
		ns := podNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, podServer(ns, "fx", "--events-file="+events))).To(Succeed())
		d := deploymentOf(ns, "fx")
		runShim(shimBin, shimPort, tokenSecretOf(ns, "fx"), fixtureBin, "--events-file="+events)
		pod := createPod(ns, "fx", d)
		setPodStatus(pod, readyStatus())
		first := readyAt(ns, "fx", 1)
		Expect(first.Status.Runtime).To(Equal(v1alpha1.RuntimePod))
		Expect(first.Status.PodName).To(Equal(pod.Name))
		Expect(first.Status.LastError).To(BeNil(), "waiting is over once connected")
		Expect(toolNames(first)).To(ContainElement("mcp__fx__echo"))
		out, _, err := env.Kubectl(ctx, "get", "mcpservers", "-n", ns, "-o", "wide")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`RUNTIME\s+REPLICA\n.*\sPod\s+manager-test-0\n`))

		Expect(k8s.Delete(ctx, pod)).To(Succeed())
		Eventually(phaseOf(ns, "fx"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseReconnecting))
		Eventually(func() []fixture.Lifetime { return lifetimes(events) }, eventuallyTimeout, poll).Should(
			ContainElement(HaveField("End", Not(BeZero()))), "the old Pod's server process ended")
		replacement := createPod(ns, "fx", d)
		setPodStatus(replacement, readyStatus())
		again := readyAt(ns, "fx", 2)
		Expect(again.Status.PodName).To(Equal(replacement.Name))
		Expect(again.Status.Tools).To(Equal(first.Status.Tools))
		Expect(again.Status.FailedAttempts).To(BeZero())
	})

	It("hot-swaps a spec change: the old server process is gone before the Deployment rolls", func(ctx SpecContext) {
		ns := podNamespace()
		events := filepath.Join(GinkgoT().TempDir(), "events")
		Expect(k8s.Create(ctx, podServer(ns, "fx", "--events-file="+events))).To(Succeed())
		d := deploymentOf(ns, "fx")
		runShim(shimBin, shimPort, tokenSecretOf(ns, "fx"), fixtureBin, "--events-file="+events)
		setPodStatus(createPod(ns, "fx", d), readyStatus())
		readyAt(ns, "fx", 1)

		rolled := watchDeployment(ns, "fx")
		editSpec(ns, "fx", func(obj *v1alpha1.McpServer) {
			obj.Spec.Stdio.Args = append(obj.Spec.Stdio.Args, "--server-version=2.0.0")
		})
		var at time.Time
		Eventually(rolled, eventuallyTimeout).Should(Receive(&at))
		lts := lifetimes(events)
		Expect(lts).To(HaveLen(1))
		Expect(lts[0].End).NotTo(BeZero(), "the server process still ran when the Deployment rolled")
		Expect(lts[0].End.Before(at)).To(BeTrue(), "exit %s, roll %s", lts[0].End, at)
		Expect(templateHash(deploymentOf(ns, "fx"))).NotTo(Equal(templateHash(d)))
	})

	It("rolls the Deployment when a Secret its env references changes", func(ctx SpecContext) {
		ns := podNamespace()
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"token": "one"}}
		Expect(k8s.Create(ctx, secret)).To(Succeed())
		obj := podServer(ns, "fx")
		obj.Spec.Stdio.Env = []corev1.EnvVar{{Name: "API_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		before := templateHash(deploymentOf(ns, "fx"))
		Expect(deploymentOf(ns, "fx").Spec.Template.Spec.Containers[0].Env).To(ContainElement(obj.Spec.Stdio.Env[0]),
			"the kubelet resolves the reference; the value is never in the Deployment")

		secret.StringData = map[string]string{"token": "two"}
		Expect(k8s.Update(ctx, secret)).To(Succeed())
		Eventually(func() string { return templateHash(deploymentOf(ns, "fx")) }, eventuallyTimeout, poll).ShouldNot(Equal(before))
		d := deploymentOf(ns, "fx")
		Expect(strings.Join(d.Spec.Template.Spec.Containers[0].Command, " ")).NotTo(ContainSubstring("two"))
	})

	It("puts back a Deployment deleted or edited by hand", func(ctx SpecContext) {
		ns := podNamespace()
		Expect(k8s.Create(ctx, podServer(ns, "fx"))).To(Succeed())
		d := deploymentOf(ns, "fx")
		d.Spec.Replicas = ptr.To[int32](0)
		// The manager's cache strips this annotation; putting the spec back
		// must not delete it.
		d.Annotations = map[string]string{"example.com/note": "kept"}
		Expect(k8s.Update(ctx, d)).To(Succeed())
		Eventually(func() int32 { return *deploymentOf(ns, "fx").Spec.Replicas }, eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		Expect(deploymentOf(ns, "fx").Annotations).To(HaveKeyWithValue("example.com/note", "kept"))
		Expect(k8s.Delete(ctx, deploymentOf(ns, "fx"))).To(Succeed())
		Eventually(func() k8stypes.UID { return deploymentOf(ns, "fx").UID }, eventuallyTimeout, poll).ShouldNot(Equal(d.UID))
	})

	It("renews the token and the shim's key pair with every roll, and opens the tunnel only to the pinned certificate", func(ctx SpecContext) {
		ns := podNamespace()
		obj := podServer(ns, "fx")
		// The refused shim is replaced once status shows the refusal: the
		// attempts must outlast that, however busy the machine (four at
		// 50-400 ms were spent in 600 ms under a full make test).
		obj.Spec.Reconnect.MaxAttempts = ptr32(1000)
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		d1 := deploymentOf(ns, "fx")
		s1 := tokenSecretOf(ns, "fx")
		Expect(s1.Annotations).To(HaveKeyWithValue(podruntime.IssuedForAnnotation, templateHash(d1)))
		Expect(podruntime.CredentialsOf(s1)).Error().NotTo(HaveOccurred())
		stop := runShim(shimBin, shimPort, s1, fixtureBin)
		setPodStatus(createPod(ns, "fx", d1), readyStatus())
		readyAt(ns, "fx", 1)

		editSpec(ns, "fx", func(obj *v1alpha1.McpServer) {
			obj.Spec.Stdio.Args = append(obj.Spec.Stdio.Args, "--server-version=2.0.0")
		})
		Eventually(func() string { return templateHash(deploymentOf(ns, "fx")) }, eventuallyTimeout, poll).ShouldNot(Equal(templateHash(d1)))
		d2 := deploymentOf(ns, "fx")
		s2 := tokenSecretOf(ns, "fx")
		Expect(s2.Annotations).To(HaveKeyWithValue(podruntime.IssuedForAnnotation, templateHash(d2)))
		for _, key := range []string{podruntime.TokenKey, podruntime.CertKey, podruntime.PrivateKeyKey} {
			Expect(s2.Data[key]).NotTo(Equal(s1.Data[key]), "%s was kept across the roll", key)
		}
		stop()

		// The new Pod's shim with the old key pair: the manager's pin
		// refuses it, and the token is never sent to it.
		stale := s2.DeepCopy()
		stale.Data[podruntime.CertKey], stale.Data[podruntime.PrivateKeyKey] = s1.Data[podruntime.CertKey], s1.Data[podruntime.PrivateKeyKey]
		stop = runShim(shimBin, shimPort, stale, fixtureBin)
		rolled := createPod(ns, "fx", d2)
		setPodStatus(rolled, readyStatus())
		Eventually(func(g Gomega) {
			got := get(ns, "fx")
			g.Expect(got.Status.LastError).NotTo(BeNil())
			g.Expect(got.Status.LastError.Stage).To(Equal("transport-start"))
			g.Expect(got.Status.LastError.Message).To(ContainSubstring("presented a certificate other than the one issued for this server"))
		}, eventuallyTimeout, poll).Should(Succeed())
		stop()

		runShim(shimBin, shimPort, s2, fixtureBin)
		Expect(readyAt(ns, "fx", 1).Status.PodName).To(Equal(rolled.Name))
		Expect(tokenSecretOf(ns, "fx").Data).To(Equal(s2.Data), "no roll, no new credentials")
	})

	It("renders the NetworkPolicy that admits only the manager's Pods at the shim's port, and puts it back when edited", func(ctx SpecContext) {
		ns := podNamespace()
		Expect(k8s.Create(ctx, podServer(ns, "fx"))).To(Succeed())
		d := deploymentOf(ns, "fx")
		np := networkPolicyOf(ns, "fx")
		Expect(metav1.GetControllerOf(np).UID).To(Equal(get(ns, "fx").UID))
		Expect(np.Labels).To(Equal(d.Labels))
		Expect(np.Spec.PodSelector).To(Equal(*d.Spec.Selector))
		Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
		Expect(np.Spec.Ingress).To(HaveLen(1))
		rule := np.Spec.Ingress[0]
		Expect(rule.Ports).To(HaveLen(1))
		Expect(rule.Ports[0].Port.IntValue()).To(Equal(shimPort))
		Expect(*rule.Ports[0].Protocol).To(Equal(corev1.ProtocolTCP))
		Expect(rule.From).To(Equal([]networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": testManagerNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: testManagerLabels},
		}}))

		// Opened to everyone by hand: closed again. The annotation added in
		// the same edit stays: the manager patches the spec, it does not
		// write back the annotation-stripped object of its cache.
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
		np.Annotations = map[string]string{"example.com/note": "kept"}
		Expect(k8s.Update(ctx, np)).To(Succeed())
		Eventually(func() []networkingv1.NetworkPolicyPeer {
			return networkPolicyOf(ns, "fx").Spec.Ingress[0].From
		}, eventuallyTimeout, poll).Should(Equal(rule.From))
		Expect(networkPolicyOf(ns, "fx").Annotations).To(HaveKeyWithValue("example.com/note", "kept"))
		// A rule added beside the manager's is removed too: the spec must
		// equal the rendering, not merely contain it.
		np = networkPolicyOf(ns, "fx")
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
		Expect(k8s.Update(ctx, np)).To(Succeed())
		Eventually(func() []networkingv1.NetworkPolicyIngressRule {
			return networkPolicyOf(ns, "fx").Spec.Ingress
		}, eventuallyTimeout, poll).Should(HaveLen(1))
		// And what the apiserver stores is the rendering: no write per reconcile.
		rv := networkPolicyOf(ns, "fx").ResourceVersion
		editSpec(ns, "fx", func(obj *v1alpha1.McpServer) { obj.Spec.ToolCallTimeoutMs = ptr32(12345) })
		Consistently(func() string { return networkPolicyOf(ns, "fx").ResourceVersion }, time.Second, poll).Should(Equal(rv))
	})

	It("removes the Deployment and the token Secret on a switch to Local or HTTP, and on delete", func(ctx SpecContext) {
		// Local: a namespace that allows it, and no image.
		local := podServer(trusted, "to-local")
		Expect(k8s.Create(ctx, local)).To(Succeed())
		deploymentOf(trusted, "to-local")
		editSpec(trusted, "to-local", func(obj *v1alpha1.McpServer) { obj.Spec.Stdio.Image = "" })
		Expect(readyAt(trusted, "to-local", 1).Status.Runtime).To(Equal(v1alpha1.RuntimeLocal))
		expectPodObjectsGone(trusted, "to-local")

		ns := podNamespace()
		Expect(k8s.Create(ctx, podServer(ns, "to-http"))).To(Succeed())
		deploymentOf(ns, "to-http")
		editSpec(ns, "to-http", func(obj *v1alpha1.McpServer) {
			obj.Spec.Transport, obj.Spec.Stdio = v1alpha1.TransportStreamableHTTP, nil
			obj.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: "http://127.0.0.1:1/mcp"}
		})
		expectPodObjectsGone(ns, "to-http")
		Eventually(func() v1alpha1.Runtime { return get(ns, "to-http").Status.Runtime }, eventuallyTimeout, poll).Should(BeEmpty())

		Expect(k8s.Create(ctx, podServer(ns, "deleted"))).To(Succeed())
		deploymentOf(ns, "deleted")
		Expect(k8s.Delete(ctx, get(ns, "deleted"))).To(Succeed())
		expectPodObjectsGone(ns, "deleted")
	})

	It("chooses the runtime by the flags: Local only where allowed, the node image for npx, InvalidSpec without a default image", func(ctx SpecContext) {
		local := stdioServer(trusted, "child")
		Expect(k8s.Create(ctx, local)).To(Succeed())
		Expect(readyAt(trusted, "child", 1).Status.Runtime).To(Equal(v1alpha1.RuntimeLocal))

		ns := podNamespace()
		npx := stdioServer(ns, "npx")
		npx.Spec.Stdio.Command, npx.Spec.Stdio.Args = "npx", []string{"-y", "@modelcontextprotocol/server-everything"}
		Expect(k8s.Create(ctx, npx)).To(Succeed())
		Expect(deploymentOf(ns, "npx").Spec.Template.Spec.Containers[0].Image).To(Equal(policy.DefaultNodeImage))
		Eventually(func() v1alpha1.Runtime { return get(ns, "npx").Status.Runtime }, eventuallyTimeout, poll).Should(Equal(v1alpha1.RuntimePod))

		Expect(k8s.Create(ctx, stdioServer(ns, "fixture"))).To(Succeed())
		Eventually(phaseOf(ns, "fixture"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseInvalid))
		c := meta(get(ns, "fixture"), v1alpha1.ConditionReady)
		Expect(c.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
		Expect(c.Message).To(ContainSubstring("spec.stdio.image"))
		Consistently(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podruntime.DeploymentName("fixture")}, &appsv1.Deployment{}))
		}, time.Second, poll).Should(BeTrue(), "an invalid spec gets no Deployment")
	})

	It("never takes over someone else's object of the same name, and replaces one left by an earlier McpServer of the same name", func(ctx SpecContext) {
		ns := podNamespace()
		labels := map[string]string{"app": "mine"}
		theirs := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podruntime.DeploymentName("taken")},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/mine:1"}}}}}}
		Expect(k8s.Create(ctx, theirs)).To(Succeed())
		Expect(k8s.Create(ctx, podServer(ns, "taken"))).To(Succeed())
		Eventually(phaseOf(ns, "taken"), eventuallyTimeout, poll).Should(Equal(v1alpha1.PhaseConflict))
		c := meta(get(ns, "taken"), v1alpha1.ConditionReady)
		Expect(c.Reason).To(Equal(v1alpha1.ReasonPodObjectConflict))
		Expect(c.Message).To(ContainSubstring(`The Deployment "taken-mcp" exists and is not owned by this McpServer`))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
		Expect(theirs.OwnerReferences).To(BeEmpty())
		Expect(theirs.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/mine:1"))

		leftover := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podruntime.TokenSecretName("again"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "McpServer",
				Name: "again", UID: "uid-of-a-deleted-mcpserver", Controller: ptr.To(true)}}},
			StringData: map[string]string{podruntime.TokenKey: "an-old-token"}}
		Expect(k8s.Create(ctx, leftover)).To(Succeed())
		Expect(k8s.Create(ctx, podServer(ns, "again"))).To(Succeed())
		uid := get(ns, "again").UID
		Eventually(func() k8stypes.UID {
			if ref := metav1.GetControllerOf(tokenSecretOf(ns, "again")); ref != nil {
				return ref.UID
			}
			return ""
		}, eventuallyTimeout, poll).Should(Equal(uid))
		Expect(string(tokenSecretOf(ns, "again").Data[podruntime.TokenKey])).NotTo(Equal("an-old-token"))
	})

	It("caches only the Pods and Deployments it labelled", func(ctx SpecContext) {
		ns := podNamespace()
		foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1"}}}}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		Expect(k8s.Create(ctx, podServer(ns, "fx"))).To(Succeed())
		ours := createPod(ns, "fx", deploymentOf(ns, "fx"))
		Eventually(func(g Gomega) {
			list := &corev1.PodList{}
			g.Expect(mgrCache.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(ConsistOf(HaveField("Name", ours.Name)))
		}, eventuallyTimeout, poll).Should(Succeed())
		Consistently(func() bool {
			return apierrors.IsNotFound(mgrCache.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Pod{}))
		}, 500*time.Millisecond, poll).Should(BeTrue())
	})

	It("keeps the credentials across a manager restart, so that the Pod does not roll", func(ctx SpecContext) {
		ns := podNamespace()
		Expect(k8s.Create(ctx, podServer(ns, "fx"))).To(Succeed())
		before := deploymentOf(ns, "fx")
		creds := tokenSecretOf(ns, "fx").Data
		Eventually(func() int64 { return get(ns, "fx").Status.ConnectionGeneration }, eventuallyTimeout, poll).Should(BeEquivalentTo(1))
		stopManager()
		startManagerWith(policy.RuntimeConfig{LocalNamespaces: []string{trusted}},
			podruntime.Options{ShimImage: testShimImage, Port: int32(shimPort)})
		Eventually(func() int64 { return get(ns, "fx").Status.ConnectionGeneration }, eventuallyTimeout, poll).Should(
			BeEquivalentTo(2), "the new manager's supervisor runs")
		Consistently(func() int64 { return deploymentOf(ns, "fx").Generation }, time.Second, poll).Should(Equal(before.Generation))
		Expect(tokenSecretOf(ns, "fx").Data).To(Equal(creds), "the same template keeps its credentials")
	})
})

// podNamespace is a namespace where stdio servers without an image do not
// run Local, with the ServiceAccount that Pods need (no controller-manager
// creates it in envtest).
func podNamespace() string {
	ns := newNamespace()
	Expect(k8s.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})).To(Succeed())
	return ns
}

// podServer is the fixture in the image example.com/fixture:1.
func podServer(ns, name string, args ...string) *v1alpha1.McpServer {
	obj := stdioServer(ns, name, args...)
	obj.Spec.Stdio.Image = "example.com/fixture:1"
	return obj
}

// editSpec applies edit to the McpServer's latest version, again on a
// conflict: while the server waits for its Pod, the manager keeps writing
// its status.
func editSpec(ns, name string, edit func(*v1alpha1.McpServer)) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := get(ns, name)
		edit(obj)
		return k8s.Update(context.Background(), obj)
	})).To(Succeed())
}

// deploymentOf waits for the server's Deployment and returns it.
func deploymentOf(ns, name string) *appsv1.Deployment {
	GinkgoHelper()
	return eventuallyGet(&appsv1.Deployment{}, ns, podruntime.DeploymentName(name))
}

func networkPolicyOf(ns, name string) *networkingv1.NetworkPolicy {
	GinkgoHelper()
	return eventuallyGet(&networkingv1.NetworkPolicy{}, ns, podruntime.DeploymentName(name))
}

func tokenSecretOf(ns, name string) *corev1.Secret {
	GinkgoHelper()
	return eventuallyGet(&corev1.Secret{}, ns, podruntime.TokenSecretName(name))
}

// eventuallyGet waits until the object ns/name exists and reads it into o.
func eventuallyGet[T client.Object](o T, ns, name string) T {
	GinkgoHelper()
	Eventually(func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, o)
	}, eventuallyTimeout, poll).Should(Succeed())
	return o
}

func templateHash(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[podruntime.TemplateHashAnnotation]
}

// createPod creates a Pod of d's template, as its ReplicaSet would.
func createPod(ns, name string, d *appsv1.Deployment) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: podruntime.DeploymentName(name) + "-",
			Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
		Spec: *d.Spec.Template.Spec.DeepCopy(),
	}
	Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	return pod
}

// setPodStatus writes the Pod's status as the kubelet would.
func setPodStatus(pod *corev1.Pod, st corev1.PodStatus) {
	GinkgoHelper()
	Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	pod.Status = st
	Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
}

func waitingStatus(container, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: container, Image: "example.com/fixture:1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

// readyStatus is a Ready Pod at 127.0.0.1, where the spec's shim listens.
func readyStatus() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
}

// runShim runs the shim on 127.0.0.1:port with the credentials of secret
// (token and key pair), as the server's container would, until the spec
// ends or the returned stop is called.
func runShim(bin string, port int, secret *corev1.Secret, command ...string) (stop func()) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	files := map[string]string{}
	for _, key := range []string{podruntime.TokenKey, podruntime.CertKey, podruntime.PrivateKeyKey} {
		files[key] = filepath.Join(dir, key)
		Expect(os.WriteFile(files[key], secret.Data[key], 0o600)).To(Succeed())
	}
	args := append([]string{"--listen=127.0.0.1:" + strconv.Itoa(port), "--token-file=" + files[podruntime.TokenKey],
		"--tls-cert-file=" + files[podruntime.CertKey], "--tls-key-file=" + files[podruntime.PrivateKeyKey],
		"--terminate-grace=300ms", "--"}, command...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		Eventually(exited, eventuallyTimeout).Should(BeClosed())
	}
	DeferCleanup(stop)
	Eventually(func() error {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = c.Close()
		}
		return err
	}, eventuallyTimeout, poll).Should(Succeed())
	return stop
}

// watchDeployment sends the time it first sees the server's Deployment with
// a new template.
func watchDeployment(ns, name string) <-chan time.Time {
	GinkgoHelper()
	current := templateHash(deploymentOf(ns, name))
	w, err := directClient().Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	out := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type == watch.Modified && templateHash(d) != current {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}

func expectPodObjectsGone(ns, name string) {
	GinkgoHelper()
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podruntime.DeploymentName(name)}, &appsv1.Deployment{})) &&
			apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podruntime.DeploymentName(name)}, &networkingv1.NetworkPolicy{})) &&
			apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podruntime.TokenSecretName(name)}, &corev1.Secret{}))
	}, eventuallyTimeout, poll).Should(BeTrue(), "the Deployment, the NetworkPolicy and the token Secret of %s/%s", ns, name)
}

func freePort() int {
	GinkgoHelper()
	addr, err := testenv.FreeAddr()
	Expect(err).NotTo(HaveOccurred())
	_, port, err := net.SplitHostPort(addr)
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.Atoi(port)
	Expect(err).NotTo(HaveOccurred())
	return n
}
