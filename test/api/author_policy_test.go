package api_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// The author-references policy (config/admission): an McpServer is
// admitted only when its author may get every Secret and ConfigMap it
// refers to. Authors are impersonated users with Roles that name the
// objects they may get.

const author = "alice@example.com"

// The objects the author may get, and one they may not.
const (
	grantedSecret    = "granted-secret"
	grantedConfigMap = "granted-settings"
	deniedName       = "denied"
)

func secretEnv(name, secret string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretRef(secret, "k")}}
}

func configMapEnv(name, cm string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: configMapRef(cm, "k")}}
}

func secretHeader(name, secret string) v1alpha1.HTTPHeader {
	return v1alpha1.HTTPHeader{Name: name, ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: *secretRef(secret, "k")}}
}

// authorRules: create and edit McpServers, get the named Secrets and
// ConfigMaps and nothing else of them.
func authorRules(secrets, configMaps []string) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"},
		Verbs: []string{"get", "create", "update", "patch"}}}
	if len(secrets) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets})
	}
	if len(configMaps) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: configMaps})
	}
	return rules
}

// createAs creates obj in ns as user, with a server-side dry run first
// (the policy runs on both), and returns the real create's error.
func createAs(ctx context.Context, user, ns string, obj client.Object) error {
	GinkgoHelper()
	c := clientAs(user)
	dry := obj.DeepCopyObject().(client.Object)
	dry.SetNamespace(ns)
	dryErr := c.Create(ctx, dry, client.DryRunAll)
	obj.SetNamespace(ns)
	err := c.Create(ctx, obj)
	Expect(fmt.Sprint(dryErr)).To(Equal(fmt.Sprint(err)), "the dry run and the create are admitted alike")
	return err
}

// refusal is the policy's message for user and the object kind/name that
// field refers to in ns.
func refusal(user, kind, name, ns, field string) string {
	return fmt.Sprintf("%s may not get %s %q in namespace %s, which %s refers to", user, kind, name, ns, field)
}

var _ = Describe("Admission of McpServers checks their author's rights to what they refer to", Ordered, func() {
	var ns string

	BeforeAll(func(ctx SpecContext) {
		installAdmissionPolicies(ctx)
		// The apiserver enforces a new policy once its informer has it.
		probeNS := newNamespace(ctx)
		grant(ctx, probeNS, author, authorRules(nil, nil)...)
		Eventually(func(g Gomega, ctx context.Context) {
			err := clientAs(author).Create(ctx, stdioServer(func(s *v1alpha1.McpServer) {
				s.Namespace = probeNS
				s.Spec.Stdio.Env = []corev1.EnvVar{secretEnv("TOKEN", deniedName)}
			}), client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the policy is enforced")
	})

	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		grant(ctx, ns, author, authorRules([]string{grantedSecret}, []string{grantedConfigMap})...)
	})

	DescribeTable("refuses a reference the author may not get, naming it",
		func(ctx SpecContext, obj *v1alpha1.McpServer, kind, field string) {
			err := createAs(ctx, author, ns, obj)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(refusal(author, kind, deniedName, ns, field)))
		},
		Entry("a Secret in spec.stdio.env",
			stdioServer(env(secretEnv("TOKEN", deniedName))), "Secret", "spec.stdio.env TOKEN"),
		Entry("a ConfigMap in spec.stdio.env",
			stdioServer(env(configMapEnv("REGION", deniedName))), "ConfigMap", "spec.stdio.env REGION"),
		Entry("a Secret in spec.streamableHttp.headers",
			httpServer(headers(secretHeader("Authorization", deniedName))), "Secret", "spec.streamableHttp.headers Authorization"),
		Entry("the third object of three (Secrets, then ConfigMaps), after two the author may get",
			stdioServer(env(configMapEnv("C", deniedName), secretEnv("A", grantedSecret), configMapEnv("B", grantedConfigMap),
				secretEnv("A2", grantedSecret))), "ConfigMap", "spec.stdio.env C"),
	)

	DescribeTable("admits what the author may get",
		func(ctx SpecContext, obj *v1alpha1.McpServer) {
			Expect(createAs(ctx, author, ns, obj)).To(Succeed())
		},
		Entry("no reference", stdioServer()),
		Entry("a Secret and a ConfigMap in spec.stdio.env, one of them twice",
			stdioServer(env(secretEnv("A", grantedSecret), configMapEnv("B", grantedConfigMap), secretEnv("C", grantedSecret)))),
		Entry("a Secret in spec.streamableHttp.headers",
			httpServer(headers(secretHeader("Authorization", grantedSecret), v1alpha1.HTTPHeader{Name: "X-Team", Value: ptr.To("a")}))),
	)

	It("checks every reference the manager resolves (policy.Refs), each on its own", func(ctx SpecContext) {
		for _, obj := range []*v1alpha1.McpServer{
			stdioServer(env(secretEnv("S1", "s1"), configMapEnv("C1", "c1"), secretEnv("S2", "s2"), configMapEnv("C2", "c2"))),
			httpServer(headers(secretHeader("H1", "h1"), secretHeader("H2", "h2"))),
		} {
			refs := policy.Refs(&obj.Spec)
			Expect(len(refs)).To(BeNumerically(">=", 2))
			for i, missing := range refs {
				// The author may get every object referred to but one.
				user := fmt.Sprintf("author-%s-%d@example.com", obj.Spec.Transport, i)
				var secrets, configMaps []string
				for _, r := range refs {
					switch {
					case r == missing:
					case r.Kind == policy.SecretRef:
						secrets = append(secrets, r.Name)
					default:
						configMaps = append(configMaps, r.Name)
					}
				}
				grant(ctx, ns, user, authorRules(secrets, configMaps)...)
				err := createAs(ctx, user, ns, obj.DeepCopy())
				Expect(err).To(HaveOccurred(), "%s may not get %s", user, missing)
				Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("%s may not get %s %q", user, missing.Kind, missing.Name)))
			}
		}
	})

	It("checks the spec again on an update, and not a change of metadata only", func(ctx SpecContext) {
		obj := stdioServer(env(secretEnv("TOKEN", deniedName)))
		obj.Namespace = ns
		Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "an admin may refer to any Secret")

		c := clientAs(author)
		Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		obj.Annotations = map[string]string{"mcpbridge.dev/restartedAt": "now"}
		Expect(c.Update(ctx, obj)).To(Succeed(), "an annotation sends no Secret anywhere")

		obj.Spec.Stdio.Args = []string{"--tools=6"}
		err := c.Update(ctx, obj)
		Expect(err).To(HaveOccurred(), "the author would take over a server with a Secret they may not read")
		Expect(err.Error()).To(ContainSubstring(refusal(author, "Secret", deniedName, ns, "spec.stdio.env TOKEN")))
	})

	It("checks up to 16 distinct objects and refuses more, saying so", func(ctx SpecContext) {
		var names []string
		var vars []corev1.EnvVar
		for i := range 17 {
			names = append(names, fmt.Sprintf("s%02d", i))
			vars = append(vars, secretEnv(fmt.Sprintf("S%02d", i), names[i]))
		}
		grant(ctx, ns, author, authorRules(names, nil)...)
		Expect(createAs(ctx, author, ns, stdioServer(named("sixteen"), env(vars[:16]...)))).To(Succeed())

		err := createAs(ctx, author, ns, stdioServer(named("seventeen"), env(vars...)))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("refers to 17 distinct Secrets and ConfigMaps; at most 16"))
	})
})
