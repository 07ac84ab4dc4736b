package api_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/testenv"
)

// The ValidatingAdmissionPolicies of config/admission, as config/default
// ships them (names prefixed, the manager's ServiceAccount written in).

// managerUser is the user name of config/default's manager ServiceAccount.
const managerUser = "system:serviceaccount:mcpbridge-system:mcpbridge-manager"

// installAdmissionPolicies creates the ValidatingAdmissionPolicies and their
// bindings that config/default renders, and deletes them when the container
// ends. Whether the apiserver enforces them yet is for the caller to wait
// for: it learns of new policies from an informer.
func installAdmissionPolicies(ctx context.Context) {
	GinkgoHelper()
	root, err := testenv.ModuleRoot()
	Expect(err).NotTo(HaveOccurred())
	objs, err := testEnv.Kustomize(ctx, filepath.Join(root, "config", "default"))
	Expect(err).NotTo(HaveOccurred())
	var kinds []string
	for _, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicy" && o.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		o.SetNamespace("") // cluster-scoped
		Expect(k8sClient.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, o))).To(Succeed())
		})
	}
	Expect(kinds).To(ConsistOf(
		"ValidatingAdmissionPolicy/mcpbridge-author-references",
		"ValidatingAdmissionPolicyBinding/mcpbridge-author-references",
		"ValidatingAdmissionPolicy/mcpbridge-manager-writes",
		"ValidatingAdmissionPolicyBinding/mcpbridge-manager-writes",
	))
}

// clientAs is a client that impersonates user: the apiserver authorizes
// and admits its requests as that user's, as for a real token.
func clientAs(user string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// grant gives user the rules in ns (a Role and its RoleBinding), or
// cluster-wide when ns is empty, until the spec or container ends.
func grant(ctx context.Context, ns, user string, rules ...rbacv1.PolicyRule) {
	GinkgoHelper()
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
	meta := metav1.ObjectMeta{GenerateName: "api-test-", Namespace: ns}
	var role, binding client.Object
	if ns == "" {
		r := &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rules}
		Expect(k8sClient.Create(ctx, r)).To(Succeed())
		role = r
		binding = &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}
	} else {
		r := &rbacv1.Role{ObjectMeta: meta, Rules: rules}
		Expect(k8sClient.Create(ctx, r)).To(Succeed())
		role = r
		binding = &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
	}
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, role))).To(Succeed())
	})
	if len(rules) > 0 {
		waitGranted(ctx, ns, user, rules[0])
	}
}

// waitGranted waits until the apiserver's authorizer, which learns of roles
// and bindings from its informers, allows user the first verb of rule: a
// request made at once after the grant could still be refused for RBAC.
func waitGranted(ctx context.Context, ns, user string, rule rbacv1.PolicyRule) {
	GinkgoHelper()
	attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: rule.Verbs[0],
		Group: rule.APIGroups[0], Resource: rule.Resources[0]}
	if len(rule.ResourceNames) > 0 {
		attrs.Name = rule.ResourceNames[0]
	}
	Eventually(func(g Gomega) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}
		g.Expect(k8sClient.Create(ctx, sar)).To(Succeed())
		g.Expect(sar.Status.Allowed).To(BeTrue(), "%s may %s %s", user, attrs.Verb, attrs.Resource)
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
}
