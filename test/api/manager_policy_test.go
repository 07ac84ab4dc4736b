package api_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// The manager-writes policy (config/admission): the manager's
// ServiceAccount, impersonated, may write only the objects of its
// McpServers, and Deployments only of the shape podruntime renders. The
// allowed objects are podruntime's own rendering, so that the policy and
// the renderer cannot drift apart unnoticed.

// rendered is what the manager writes for obj: its Deployment and its token
// Secret, exactly as the reconciler has podruntime render them.
func rendered(obj *v1alpha1.McpServer, token string) (*appsv1.Deployment, *corev1.Secret) {
	GinkgoHelper()
	p, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, policy.Values{}, policy.RuntimeConfig{})
	Expect(err).NotTo(HaveOccurred())
	d, err := podruntime.Deployment(obj, p, token, podruntime.Options{ShimImage: "ghcr.io/mcpbridge/operator:v1"})
	Expect(err).NotTo(HaveOccurred())
	creds, err := podruntime.NewCredentials(obj)
	Expect(err).NotTo(HaveOccurred())
	creds.Token = token
	return d, podruntime.TokenSecret(obj, creds, "issued-for-"+token)
}

// podServerIn is a stdio McpServer of the Pod runtime, created in ns.
func podServerIn(ctx context.Context, ns string) *v1alpha1.McpServer {
	GinkgoHelper()
	obj := stdioServer(image("ghcr.io/example/mcp-fixture:v1"))
	obj.Namespace = ns
	Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	return obj
}

// expectManagerRefused creates obj as the manager, dry run, and expects it
// refused with a message containing why.
func expectManagerRefused(ctx context.Context, obj client.Object, why string) {
	GinkgoHelper()
	err := clientAs(managerUser).Create(ctx, obj, client.DryRunAll)
	Expect(err).To(HaveOccurred(), "the manager may not create %s %s/%s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName())
	Expect(err.Error()).To(ContainSubstring(why))
}

var _ = Describe("Admission confines the manager's writes to its McpServers' objects", Ordered, func() {
	var (
		ns  string
		obj *v1alpha1.McpServer
	)

	BeforeAll(func(ctx SpecContext) {
		installAdmissionPolicies(ctx)
		// RBAC lets the manager write these anywhere; only the policy stops it.
		grant(ctx, "", managerUser,
			rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "create", "update"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update"}},
			rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "create", "update"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}},
			rbacv1.PolicyRule{APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcptoolsets"}, Verbs: []string{"get", "create", "update"}},
		)
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}}
		Eventually(func(ctx context.Context) error {
			return clientAs(managerUser).Create(ctx, probe.DeepCopy(), client.DryRunAll)
		}).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred(), "the policy is enforced")
	})

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		obj = podServerIn(ctx, ns)
	})

	It("lets the manager create and update the Deployment and token Secret podruntime renders", func(ctx SpecContext) {
		d, s := rendered(obj, "token-one")
		mgr := clientAs(managerUser)
		Expect(mgr.Create(ctx, s)).To(Succeed())
		Expect(mgr.Create(ctx, d)).To(Succeed())

		// A new token rolls the Pod: the reconciler updates both.
		next, nextSecret := rendered(obj, "token-two")
		Expect(mgr.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		d.Spec = next.Spec
		Expect(mgr.Update(ctx, d)).To(Succeed())
		Expect(mgr.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		s.Data = nextSecret.Data
		Expect(mgr.Update(ctx, s)).To(Succeed())
	})

	It("lets the manager write a NetworkPolicy of its McpServer", func(ctx SpecContext) {
		d, _ := rendered(obj, "token")
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: ns, Labels: d.Labels, OwnerReferences: d.OwnerReferences},
			Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: d.Labels}},
		}
		Expect(clientAs(managerUser).Create(ctx, np)).To(Succeed())
	})

	It("refuses the manager an arbitrary Deployment, which anyone else with the rights may create", func(ctx SpecContext) {
		arbitrary := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "miner", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "miner"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "miner"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "miner", Image: "example.com/miner"}}},
				},
			},
		}
		expectManagerRefused(ctx, arbitrary.DeepCopy(), "labelled app.kubernetes.io/managed-by=mcpbridge")
		Expect(k8sClient.Create(ctx, arbitrary, client.DryRunAll)).To(Succeed(), "the policy binds the manager only")
	})

	It("refuses the manager a rendered Deployment in kube-system without an owner reference", func(ctx SpecContext) {
		d, _ := rendered(obj, "token")
		d.Namespace, d.OwnerReferences = "kube-system", nil
		expectManagerRefused(ctx, d, "an McpServer controls")
	})

	DescribeTable("refuses the manager a Deployment of its McpServer whose Pod is not of the rendered shape",
		func(ctx SpecContext, change func(*corev1.PodSpec), why string) {
			d, _ := rendered(obj, "token")
			change(&d.Spec.Template.Spec)
			expectManagerRefused(ctx, d, why)
		},
		Entry("a privileged container", func(p *corev1.PodSpec) {
			// The apiserver refuses privileged with allowPrivilegeEscalation false.
			p.Containers[0].SecurityContext.Privileged = ptr.To(true)
			p.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, "no privileged container"),
		Entry("an added capability", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "no added capabilities"),
		Entry("privilege escalation in the init container", func(p *corev1.PodSpec) {
			p.InitContainers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
		}, "no privilege escalation"),
		Entry("a hostPath volume", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "no hostPath"),
		Entry("another Secret mounted", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "other", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: "someone-elses"}}})
		}, "its own token Secret"),
		Entry("the host network", func(p *corev1.PodSpec) { p.HostNetwork = true }, "no host network"),
		Entry("the host PID namespace", func(p *corev1.PodSpec) { p.HostPID = true }, "no host network, PID"),
		Entry("the host IPC namespace", func(p *corev1.PodSpec) { p.HostIPC = true }, "no host network, PID or IPC"),
		Entry("a host port", func(p *corev1.PodSpec) { p.Containers[0].Ports[0].HostPort = 80 }, "no host ports"),
		Entry("root allowed", func(p *corev1.PodSpec) { p.SecurityContext.RunAsNonRoot = nil }, "non-root"),
		Entry("no shim init container", func(p *corev1.PodSpec) { p.InitContainers = nil }, "install-shim"),
	)

	It("refuses the manager a Secret without its labels, or of another type than Opaque", func(ctx SpecContext) {
		_, s := rendered(obj, "token")
		unlabelled := s.DeepCopy()
		unlabelled.Labels = nil
		expectManagerRefused(ctx, unlabelled, "labelled app.kubernetes.io/managed-by=mcpbridge")

		saToken := s.DeepCopy()
		saToken.Type = corev1.SecretTypeServiceAccountToken
		saToken.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
		saToken.Data = nil
		expectManagerRefused(ctx, saToken, "only Secrets of type Opaque")
	})

	It("refuses the manager a NetworkPolicy no McpServer controls", func(ctx SpecContext) {
		d, _ := rendered(obj, "token")
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all", Namespace: ns, Labels: d.Labels}}
		expectManagerRefused(ctx, np, "an McpServer controls")
	})

	It("lets the manager write its gateway's CA Secret in its own namespace and the CA ConfigMaps, nothing like them elsewhere", func(ctx SpecContext) {
		mgr := clientAs(managerUser)
		own := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcpbridge-system"}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, own))).To(Succeed())
		caSecret := func(ns string) *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mcpbridge-gateway-ca", Namespace: ns}, Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}}
		}
		caConfigMap := func(ns, name string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"ca.crt": "cert"}}
		}
		Expect(mgr.Create(ctx, caSecret(own.Name), client.DryRunAll)).To(Succeed())
		Expect(mgr.Create(ctx, caConfigMap(ns, "mcpbridge-gateway-ca"), client.DryRunAll)).To(Succeed())

		expectManagerRefused(ctx, caSecret(ns), "labelled app.kubernetes.io/managed-by=mcpbridge")
		expectManagerRefused(ctx, caConfigMap(ns, "kube-root-ca.crt"), "only the ConfigMaps mcpbridge-gateway-ca")
		expectManagerRefused(ctx, caConfigMap(own.Name, "settings"), "only the ConfigMaps mcpbridge-gateway-ca")
	})

	It("lets the manager write its gateway's session keys Secret in its own namespace only", func(ctx SpecContext) {
		mgr := clientAs(managerUser)
		own := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcpbridge-system"}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, own))).To(Succeed())
		keys := func(ns string) *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mcpbridge-session-keys", Namespace: ns}, Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"keys.json": []byte("[]")}}
		}
		Expect(mgr.Create(ctx, keys(own.Name), client.DryRunAll)).To(Succeed())
		expectManagerRefused(ctx, keys(ns), "labelled app.kubernetes.io/managed-by=mcpbridge")
		ca := keys(own.Name)
		ca.Name = "mcpbridge-replica-ca"
		Expect(mgr.Create(ctx, ca, client.DryRunAll)).To(Succeed())
		ca.Namespace = ns
		expectManagerRefused(ctx, ca, "labelled app.kubernetes.io/managed-by=mcpbridge")
	})

	It("lets the manager write only McpToolSets an McpServer controls", func(ctx SpecContext) {
		mgr := clientAs(managerUser)
		ts := &v1alpha1.McpToolSet{ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns}, Spec: v1alpha1.McpToolSetSpec{ServerName: "tools"}}
		expectManagerRefused(ctx, ts, "labelled app.kubernetes.io/managed-by=mcpbridge")
		ts.Labels = podruntime.Labels("tools")
		expectManagerRefused(ctx, ts, "an McpServer controls")
		ts.Name, ts.Labels = obj.Name, podruntime.Labels(obj.Name)
		Expect(controllerutil.SetControllerReference(obj, ts, k8sClient.Scheme())).To(Succeed())
		Expect(mgr.Create(ctx, ts, client.DryRunAll)).To(Succeed(), "the McpToolSet of an McpServer")
	})
})
