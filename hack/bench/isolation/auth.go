package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/testenv"
)

// With -tokens the gateway authenticates as the manager's does: a real
// kube-apiserver answers its TokenReviews and SubjectAccessReviews, with
// the manager's defaults for the caches and every limit. Each tenant's
// agents are the ServiceAccount "agent" of its namespace: the victim's may
// use every McpServer of its namespace, the attacker's only its two real
// servers by name. The attacker's namespace also lists -phantoms McpServers
// that no one may use, and the attacker's probers are a ServiceAccount that
// may use none of them: each of their requests is a per-server
// authorization fan-out.

const gatewayAudience = "mcpbridge.dev"

// tokenEnv is the environment variable that hands an agents' process its
// bearer token.
const tokenEnv = "ISOLATION_BENCH_TOKEN"

// proberTokenEnv hands the attacker's agents the probers' token too.
const proberTokenEnv = "ISOLATION_BENCH_PROBER_TOKEN"

// prober keys the probers' token in authEnv.tokens.
const prober = "prober"

type authEnv struct {
	env    *testenv.Env
	c      client.Client
	tokens map[string]string // by namespace, and the probers' as prober
}

// startAuth starts the control plane at nice n and makes each namespace's
// agent ServiceAccount, its Role and a token for the gateway's audience.
func startAuth(n int) (*authEnv, error) {
	env, err := testenv.Start()
	if err != nil {
		return nil, err
	}
	a := &authEnv{env: env, c: env.Client, tokens: map[string]string{}}
	reniceChildren(n, "kube-apiserver", "etcd")
	if err := a.setUp(context.Background()); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

func (a *authEnv) setUp(ctx context.Context) error {
	mayUse := map[string][]string{victimNS: nil, attackerNS: {hostileServer, stormServer}}
	for ns, names := range mayUse {
		rule := rbacv1.PolicyRule{APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"}, Verbs: []string{"use"},
			ResourceNames: names}
		objs := []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}, Rules: []rbacv1.PolicyRule{rule}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "agent"}}},
		}
		for _, o := range objs {
			if err := a.c.Create(ctx, o); err != nil {
				return err
			}
		}
		var err error
		if a.tokens[ns], err = testenv.ServiceAccountToken(ctx, a.c, ns, "agent", 2*time.Hour, gatewayAudience); err != nil {
			return err
		}
	}
	if err := a.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: attackerNS, Name: prober}}); err != nil {
		return err
	}
	var err error
	a.tokens[prober], err = testenv.ServiceAccountToken(ctx, a.c, attackerNS, prober, 2*time.Hour, gatewayAudience)
	return err
}

// access is what the gateway checks callers with: the manager's
// authenticator and authorizer with their default limits, and the
// McpServers of each namespace as the manager's cache would list them
// (this program runs supervisors, not McpServer objects).
func (a *authEnv) access() *gateway.Access {
	// The gateway reviews a caller McpServer by McpServer in name order:
	// the phantoms sort after the attacker's own servers, so that its agents
	// are let in after a review or two, while the probers, allowed none,
	// walk through all of them.
	attacker := []string{hostileServer, stormServer}
	for i := range *flagPhantoms {
		attacker = append(attacker, fmt.Sprintf("x-phantom-%05d", i))
	}
	names := map[string][]string{victimNS: {victimServer}, attackerNS: attacker}
	servers := func(_ context.Context, ns string) ([]string, error) { return names[ns], nil }
	return gateway.NewAccess(kubeauth.NewAuthenticator(a.c, kubeauth.Options{Audiences: []string{gatewayAudience}}),
		kubeauth.NewAuthorizer(a.c, kubeauth.Options{}), servers, kubeauth.Options{})
}

func (a *authEnv) token(ns string) string {
	if a == nil {
		return ""
	}
	return a.tokens[ns]
}

func (a *authEnv) stop() {
	if a == nil {
		return
	}
	if err := a.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
}

// forgedToken is a new bearer token on every call that the gateway's local
// check cannot refuse: a well-formed JWT for the gateway's audience that
// has not expired. Only a TokenReview finds that its signature is random.
func forgedToken() string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": rand.Text()})
	claims, _ := json.Marshal(map[string]any{"aud": []string{gatewayAudience}, "exp": time.Now().Add(time.Hour).Unix(),
		"sub": "system:serviceaccount:" + attackerNS + ":" + strings.ToLower(rand.Text())})
	sig := make([]byte, 256)
	_, _ = rand.Read(sig)
	return enc.EncodeToString(header) + "." + enc.EncodeToString(claims) + "." + enc.EncodeToString(sig)
}

// reniceChildren sets nice n on every thread of this process's children
// whose command is one of names: nice is per thread on Linux, and a Go
// program's threads are already running.
func reniceChildren(n int, names ...string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range procs {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(data)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) || !slices.Contains(names, s[open+1:close]) {
			continue
		}
		tasks, _ := filepath.Glob(filepath.Join(filepath.Dir(stat), "task", "*"))
		for _, t := range tasks {
			if tid, err := strconv.Atoi(filepath.Base(t)); err == nil {
				_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, n)
			}
		}
	}
}
