package podruntime_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
)

// restrictedNamespace creates a namespace that enforces Pod Security
// "restricted", deleted when the spec ends.
func restrictedNamespace(ctx SpecContext) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "restricted-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// created stores obj (an McpServer) in ns so that the rendered objects can
// name it as their owner with its real UID.
func created(ctx SpecContext, ns string, obj *v1alpha1.McpServer) *v1alpha1.McpServer {
	GinkgoHelper()
	obj = obj.DeepCopy()
	obj.Namespace = ns
	Expect(k8s.Create(ctx, obj)).To(Succeed())
	return obj
}

// rendered is obj's Deployment on a cluster without the Local runtime.
func rendered(obj *v1alpha1.McpServer) *appsv1.Deployment {
	GinkgoHelper()
	p, err := policy.Resolve(obj.Namespace, obj.Name, &obj.Spec, values(), policy.RuntimeConfig{})
	Expect(err).NotTo(HaveOccurred())
	d, err := podruntime.Deployment(obj, p, podruntime.NewToken(), opts())
	Expect(err).NotTo(HaveOccurred())
	return d
}

// podOf is the Pod the Deployment's ReplicaSet would create.
func podOf(d *appsv1.Deployment) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: d.Name + "-", Namespace: d.Namespace,
			Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations,
		},
		Spec: *d.Spec.Template.Spec.DeepCopy(),
	}
}

// dryRun creates obj with a server-side dry run and returns the error and
// the warnings the apiserver answered with.
func dryRun(ctx SpecContext, obj client.Object) (warned []string, err error) {
	warned = warnings.during(func() { err = k8s.Create(ctx, obj, client.DryRunAll) })
	return warned, err
}

var _ = Describe("The rendered objects in a namespace that enforces Pod Security restricted", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = restrictedNamespace(ctx)
	})

	DescribeTable("are admitted without a warning: the Deployment, the Pod it makes, the token Secret, the NetworkPolicy",
		func(ctx SpecContext, obj *v1alpha1.McpServer) {
			obj = created(ctx, ns, obj)
			d := rendered(obj)

			warned, err := dryRun(ctx, d)
			Expect(err).NotTo(HaveOccurred())
			Expect(warned).To(BeEmpty(), "Pod Security warns about the Deployment's template")

			// Pod Security enforces on Pods only: this is the check that refuses.
			warned, err = dryRun(ctx, podOf(d))
			Expect(err).NotTo(HaveOccurred())
			Expect(warned).To(BeEmpty())

			creds, err := podruntime.NewCredentials(obj)
			Expect(err).NotTo(HaveOccurred())
			warned, err = dryRun(ctx, podruntime.TokenSecret(obj, creds, "hash"))
			Expect(err).NotTo(HaveOccurred())
			Expect(warned).To(BeEmpty())

			np, err := podruntime.NetworkPolicy(obj, podruntime.Options{ManagerPodLabels: managerLabels, ManagerNamespace: "mcpbridge-system"})
			Expect(err).NotTo(HaveOccurred())
			warned, err = dryRun(ctx, np)
			Expect(err).NotTo(HaveOccurred())
			Expect(warned).To(BeEmpty())
		},
		Entry("npx with the default image and every default", server()),
		Entry("every Pod field set", server(withStdio(func(s *v1alpha1.StdioTransport) {
			s.Image, s.ImagePullPolicy, s.ServiceAccountName, s.Cwd = "ghcr.io/org/srv:1.2", corev1.PullAlways, "mcp-runner", "/work"
			s.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"ephemeral-storage": resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{"memory": resource.MustParse("1Gi")},
			}
			s.Env = append(s.Env, corev1.EnvVar{Name: "HOME", Value: "/home/app"}, corev1.EnvVar{Name: "PRICE", Value: "$(HOME)$5"})
		}))),
		Entry("a name too long for a label", server(func(o *v1alpha1.McpServer) {
			o.Name, o.Spec.ServerName = "a-very-long-name-of-an-mcp-server-that-runs-in-its-own-pod.tools.example.com", "long"
		})),
	)

	// Without this the specs above would prove nothing: the namespace must
	// refuse a Pod that breaks the profile, and warn about such a Deployment.
	DescribeTable("refuse a template without one of the restricted defaults",
		func(ctx SpecContext, breakIt func(*corev1.PodSpec)) {
			d := rendered(created(ctx, ns, server()))
			breakIt(&d.Spec.Template.Spec)

			warned, err := dryRun(ctx, d)
			Expect(err).NotTo(HaveOccurred(), "Pod Security only warns about workload objects")
			Expect(warned).To(ContainElement(ContainSubstring("restricted")))

			_, err = dryRun(ctx, podOf(d))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want the Pod refused, got %v", err)
			Expect(err.Error()).To(ContainSubstring("violates PodSecurity"))
		},
		Entry("runAsNonRoot", func(s *corev1.PodSpec) {
			s.SecurityContext.RunAsNonRoot = nil
			for i := range s.InitContainers {
				s.InitContainers[i].SecurityContext.RunAsNonRoot = nil
			}
			for i := range s.Containers {
				s.Containers[i].SecurityContext.RunAsNonRoot = nil
			}
		}),
		Entry("allowPrivilegeEscalation false", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}),
		Entry("capabilities drop ALL", func(s *corev1.PodSpec) {
			s.InitContainers[0].SecurityContext.Capabilities = nil
		}),
		Entry("seccomp RuntimeDefault", func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
		}),
	)
})
