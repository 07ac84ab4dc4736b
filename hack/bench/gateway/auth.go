package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/testenv"
)

// The token modes: a real kube-apiserver answers the gateway's
// TokenReviews and SubjectAccessReviews, with the manager's defaults for
// the caches (allow 30 s, deny 5 s) and the rate limit.

const gatewayAudience = "mcpbridge.dev"

var allModes = []string{"none", "namespace", "servers"}

func parseModes(s string) ([]string, error) {
	var modes []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(allModes, m) {
			return nil, fmt.Errorf("-auth: %q is not one of %v", m, allModes)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// authEnv is the control plane with a ServiceAccount per token mode.
type authEnv struct {
	env    *testenv.Env
	c      client.Client
	tokens map[string]string // by mode
}

// startAuth starts the control plane and makes, in the bench namespace, a
// ServiceAccount that may use every McpServer (mode namespace) and one that
// may use the first -allowed of them by name (mode servers), each with a
// token for the gateway's audience.
func startAuth() (*authEnv, error) {
	env, err := testenv.Start()
	if err != nil {
		return nil, err
	}
	a := &authEnv{env: env, c: env.Client, tokens: map[string]string{}}
	if err := a.setUp(context.Background()); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

func (a *authEnv) setUp(ctx context.Context) error {
	allowed := make([]string, *flagAllowed)
	for i := range allowed {
		allowed[i] = serverName(i)
	}
	rule := rbacv1.PolicyRule{APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"}, Verbs: []string{"use"}}
	byName := rule
	byName.ResourceNames = allowed
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "namespace"}, Rules: []rbacv1.PolicyRule{rule}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "servers"}, Rules: []rbacv1.PolicyRule{byName}},
	}
	for _, mode := range []string{"namespace", "servers"} {
		objs = append(objs,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: mode}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: mode},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: mode},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: mode}}})
	}
	for _, o := range objs {
		if err := a.c.Create(ctx, o); err != nil {
			return err
		}
	}
	for _, mode := range []string{"namespace", "servers"} {
		token, err := testenv.ServiceAccountToken(ctx, a.c, namespace, mode, 2*time.Hour, gatewayAudience)
		if err != nil {
			return err
		}
		a.tokens[mode] = token
	}
	return nil
}

// access is what the gateway of mode checks with; nil for none.
func (a *authEnv) access(mode string) *gateway.Access {
	if mode == "none" {
		return nil
	}
	// The McpServers of the namespace, as the manager's cache would list
	// them (the bench runs supervisors, not McpServer objects).
	names := make([]string, *flagServers)
	for i := range names {
		names[i] = serverName(i)
	}
	servers := func(context.Context, string) ([]string, error) { return names, nil }
	return gateway.NewAccess(kubeauth.NewAuthenticator(a.c, kubeauth.Options{Audiences: []string{gatewayAudience}}),
		kubeauth.NewAuthorizer(a.c, kubeauth.Options{}), servers, kubeauth.Options{})
}

// token is the bearer token of mode's agents; "" for none.
func (a *authEnv) token(mode string) string {
	if a == nil {
		return ""
	}
	return a.tokens[mode]
}

func (a *authEnv) stop() {
	if err := a.env.Stop(); err != nil {
		fmt.Println("stopping the control plane:", err)
	}
}
