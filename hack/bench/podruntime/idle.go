package main

// The idle rows (docs/design.md, "Idle servers"): -idle-servers McpServers
// with spec.idle all asleep hold no Pod, and what they cost the manager;
// and the first call through the gateway to a sleeping server, next to the
// node's Pod start and the server's cold start measured in the same run.
//
// spec.idle.suspendAfterMs is at least 60 s (the API refuses less), so the
// wake row does not wake one server 20 times: it puts -wakes servers to
// sleep together (the first of the idle row's, when that ran) and wakes
// each once, one after another. No manager flag or clock is changed: the
// operator runs as deployed.

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/podruntime"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

const (
	// wakeSlack is what the wake goal allows beyond the Pod start and the
	// cold start.
	wakeSlack = 100 * time.Millisecond
	// podStartNS holds the standalone Deployment whose Pod start and cold
	// start the wake row is compared with.
	podStartNS = "bench-podstart"
	// gatewayPort is the manager's --gateway-bind-address in config/default.
	gatewayPort = 8090
	// tokenAudience is the manager's default --gateway-token-audiences;
	// apiAudience the apiserver's own, which a TokenReview without
	// audiences checks.
	tokenAudience = "mcpbridge.dev"
	apiAudience   = "https://kubernetes.default.svc.cluster.local"
	idlePrefix    = "idle-"
)

var (
	flagWakes        = flag.Int("wakes", 20, "sleeping servers woken one after another by a first call through the gateway (as many Pod starts and cold starts of a standalone Deployment, interleaved)")
	flagIdleServers  = flag.Int("idle-servers", 100, "McpServers with spec.idle that all go to sleep, for the idle row")
	flagIdleWave     = flag.Int("idle-wave", 25, "the idle servers are created in waves of this many, each wave once the previous one is Idle, so that the node runs at most this many of their Pods at once")
	flagSuspendAfter = flag.Duration("suspend-after", time.Minute, "spec.idle.suspendAfterMs of the idle servers (the API refuses less than 1m)")
)

// idleResults are the idle and wake rows.
type idleResults struct {
	servers, asleep     int           // idle servers, and how many of them were Idle
	pods                int           // Pods of the idle servers once all were Idle
	allIdle             time.Duration // from the last creation to all Idle and their Pods gone
	rssBefore, rssAfter int64
	rssErr              string // why rssAfter is missing
	// The manager container's restarts before the idle row and after the
	// wake row: a restart connects every server, sleeping ones too.
	restartsBefore, restartsAfter int32
	podStarts, colds              []time.Duration // standalone Deployment: 0→1 to Pod Ready; tunnel → Ready
	wakes                         []time.Duration // first call through the gateway to a sleeping server
}

func idleName(i int) string { return fmt.Sprintf("%s%03d", idlePrefix, i) }

// idleServer is server() with spec.idle and the fleet's CPU request.
func idleServer(i int) *v1alpha1.McpServer {
	s := withFleetCPU(server(idleName(i)))
	s.Spec.Idle = &v1alpha1.IdlePolicy{SuspendAfterMs: ptr(int32(flagSuspendAfter.Milliseconds()))}
	return s
}

func (b *bench) idle(ctx context.Context) error {
	mgr, err := managerPID(ctx, b.cluster)
	if err != nil {
		return err
	}
	r := &b.res.idle
	if r.restartsBefore, err = managerRestarts(ctx, b.cluster.Client); err != nil {
		return err
	}
	if r.rssBefore, err = settledRSS(mgr); err != nil {
		return err
	}
	r.servers = *flagIdleServers
	if err := b.sleepingFleet(ctx, r.servers); err != nil {
		return err
	}
	if r.asleep, err = b.countIdle(ctx); err != nil {
		return err
	}
	if r.pods, err = b.idlePods(ctx); err != nil {
		return err
	}
	// The manager may restart under load (a lost leader lease): its RSS is
	// then not comparable, and the row says so rather than ending the run.
	if r.rssAfter, err = settledRSS(mgr); err != nil {
		r.rssErr = fmt.Sprintf("not measured: the manager process ended (%v)", err)
	}
	return nil
}

// managerRestarts is the restart count of the manager Pod's containers.
func managerRestarts(ctx context.Context, c client.Client) (int32, error) {
	p, err := managerPod(ctx, c)
	if err != nil {
		return 0, err
	}
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n, nil
}

// countIdle counts the idle servers in phase Idle.
func (b *bench) countIdle(ctx context.Context) (int, error) {
	var list v1alpha1.McpServerList
	if err := b.cluster.Client.List(ctx, &list, client.InNamespace(benchNS)); err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, idlePrefix) && isIdle(&list.Items[i]) {
			n++
		}
	}
	return n, nil
}

// sleepingFleet makes sure that idle servers 0..n-1 exist and sleep: it
// creates the missing ones in waves of -idle-wave, each once the previous
// wave is Idle, then waits until all n are Idle and none of their Pods is
// left.
func (b *bench) sleepingFleet(ctx context.Context, n int) error {
	c := b.cluster.Client
	names := make([]string, n)
	for i := range n {
		names[i] = idleName(i)
	}
	var last time.Time
	for start := 0; start < n; start += *flagIdleWave {
		wave := names[start:min(n, start+*flagIdleWave)]
		created := false
		for i := start; i < start+len(wave); i++ {
			err := c.Create(ctx, idleServer(i))
			switch {
			case err == nil:
				created = true
			case !apierrors.IsAlreadyExists(err):
				return err
			}
		}
		if !created {
			continue
		}
		last = time.Now()
		if err := b.waitServers(ctx, wave, "Ready or Idle", readyOrIdle, 2*timeout); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: %d idle servers from %s Ready %s after their creation\n", len(wave), wave[0], time.Since(last).Round(time.Second))
		// Their Pods go before the next wave's start: on 2 cores, Pods
		// stopping beside Pods starting starved both.
		if err := b.waitServers(ctx, wave, "Idle", isIdle, *flagSuspendAfter+2*timeout); err != nil {
			return err
		}
	}
	if err := b.waitServers(ctx, names, "Idle", isIdle, *flagSuspendAfter+timeout); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		pods, err := b.idlePods(ctx)
		if err != nil {
			return err
		}
		if pods == 0 || time.Now().After(deadline) {
			if !last.IsZero() {
				b.res.idle.allIdle = time.Since(last)
			}
			return nil
		}
		time.Sleep(time.Second)
	}
}

func readyOrIdle(s *v1alpha1.McpServer) bool {
	return (s.Status.Phase == v1alpha1.PhaseReady || s.Status.Phase == v1alpha1.PhaseIdle) && s.Status.ToolCount > 0
}

func isIdle(s *v1alpha1.McpServer) bool {
	return s.Status.Phase == v1alpha1.PhaseIdle && s.Status.ToolCount > 0
}

// waitServers polls until cond holds for every McpServer of names, at most
// within (what the row measures is not this wait).
func (b *bench) waitServers(ctx context.Context, names []string, what string, cond func(*v1alpha1.McpServer) bool, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var list v1alpha1.McpServerList
		if err := b.cluster.Client.List(ctx, &list, client.InNamespace(benchNS)); err != nil {
			return err
		}
		byName := map[string]*v1alpha1.McpServer{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		var not []string
		for _, name := range names {
			if s := byName[name]; s == nil || !cond(s) {
				not = append(not, describe(name, s))
			}
		}
		if len(not) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d servers not %s after %s, e.g. %s", len(not), len(names), what, within, not[0])
		}
		time.Sleep(time.Second)
	}
}

func describe(name string, s *v1alpha1.McpServer) string {
	if s == nil {
		return name + ": not found"
	}
	return fmt.Sprintf("%s: phase %s, %d tools, last error %+v", name, s.Status.Phase, s.Status.ToolCount, s.Status.LastError)
}

// idlePods counts the Pods of the idle servers, terminating ones too.
func (b *bench) idlePods(ctx context.Context) (int, error) {
	var pods corev1.PodList
	if err := b.cluster.Client.List(ctx, &pods, client.InNamespace(benchNS),
		client.MatchingLabels{podruntime.ManagedByLabel: podruntime.ManagedByValue}); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Labels[podruntime.ServerLabel], idlePrefix) {
			n++
		}
	}
	return n, nil
}

// ---------------------------------------------------------------------------
// Wakes.

func (b *bench) wakes(ctx context.Context) error {
	if err := b.sleepingFleet(ctx, *flagWakes); err != nil {
		return err
	}
	if err := b.cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podStartNS}}); err != nil {
		return err
	}
	p, creds, err := createStandalone(ctx, b.cluster.Client, podStartNS, "podstart", 0)
	if err != nil {
		return err
	}
	sa := &standalone{b: b, name: "podstart", p: p, creds: creds}
	sess, err := b.agentSession(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sess.Close() }()
	r := &b.res.idle
	// Interleaved, so that both see the same machine.
	for i := range *flagWakes {
		podStart, cold, err := sa.start(ctx)
		if err != nil {
			return err
		}
		r.podStarts, r.colds = append(r.podStarts, podStart), append(r.colds, cold)
		took, err := b.wake(ctx, sess, idleName(i))
		if err != nil {
			return err
		}
		r.wakes = append(r.wakes, took)
		if r.restartsAfter, err = managerRestarts(ctx, b.cluster.Client); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: Pod start %s, cold start %s; %s woken by its first call in %s\n",
			podStart.Round(time.Millisecond), cold.Round(time.Millisecond), idleName(i), took.Round(time.Millisecond))
	}
	return deleteNamespace(ctx, b.cluster, podStartNS)
}

// wake times the first call through the gateway to the sleeping server
// name: the echo tool, whose answer must be its argument.
func (b *bench) wake(ctx context.Context, sess *mcp.ClientSession, name string) (time.Duration, error) {
	s := &v1alpha1.McpServer{}
	if err := b.cluster.Client.Get(ctx, client.ObjectKey{Namespace: benchNS, Name: name}, s); err != nil {
		return 0, err
	}
	if s.Status.Phase != v1alpha1.PhaseIdle {
		return 0, fmt.Errorf("%s is not asleep: %s", name, describe(name, s))
	}
	began := time.Now()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: registry.PublicName(name, "echo"), Arguments: map[string]any{"text": name}})
	took := time.Since(began)
	switch {
	case err != nil:
		return 0, fmt.Errorf("first call to %s: %w", name, err)
	case res.IsError || len(res.Content) != 1:
		return 0, fmt.Errorf("first call to %s: %+v", name, res.Content)
	}
	if t, ok := res.Content[0].(*mcp.TextContent); !ok || t.Text != name {
		return 0, fmt.Errorf("first call to %s answered %+v", name, res.Content[0])
	}
	return took, nil
}

// agentSession connects an agent to benchNS's endpoint of the ready
// manager Pod's gateway, with a token of a ServiceAccount allowed to use it.
func (b *bench) agentSession(ctx context.Context) (*mcp.ClientSession, error) {
	token, err := b.agentToken(ctx)
	if err != nil {
		return nil, err
	}
	mgr, err := managerPod(ctx, b.cluster.Client)
	if err != nil {
		return nil, err
	}
	endpoint := fmt.Sprintf("https://%s/namespaces/%s/mcp", net.JoinHostPort(mgr.Status.PodIP, fmt.Sprint(gatewayPort)), benchNS)
	agent := mcp.NewClient(&mcp.Implementation{Name: "bench-agent", Version: "bench"}, nil)
	deadline := time.Now().Add(timeout)
	for {
		// The manager publishes its gateway's CA in benchNS; an agent trusts
		// only it and checks the gateway Service's name while dialing the Pod.
		httpClient, err := gatewayClient(ctx, b.cluster.Client, mgr.Namespace, token)
		if err != nil {
			if time.Now().After(deadline) {
				return nil, err
			}
			time.Sleep(time.Second)
			continue
		}
		// The gateway starts with leadership, a moment after the Pod is Ready.
		sess, err := agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpClient}, nil)
		if err == nil || time.Now().After(deadline) {
			return sess, err
		}
		time.Sleep(time.Second)
	}
}

func (b *bench) agentToken(ctx context.Context) (string, error) {
	c := b.cluster.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bench-agent", Namespace: benchNS}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-agent-gateway-user", Namespace: benchNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcpbridge-gateway-user"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: benchNS, Name: sa.Name}},
	}
	if err := c.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return testenv.ServiceAccountToken(ctx, c, sa.Namespace, sa.Name, time.Hour, tokenAudience, apiAudience)
}

// standalone is a Deployment of the fixture without an McpServer, scaled
// between 0 and 1 as the manager scales a sleeping server's, and reached
// by a supervisor in this program: the node's Pod start and the server's
// cold start, without the operator.
type standalone struct {
	b     *bench
	name  string
	p     *policy.Policy
	creds podruntime.Credentials
}

// start scales the Deployment to 1 and times it until its Pod is Ready (a
// watch), then a supervisor through the tunnel to that Pod until Ready
// (tunnel, spawn, initialize, tools/list); then it scales back to 0 and
// waits until the Pod is gone.
func (s *standalone) start(ctx context.Context) (podStart, cold time.Duration, err error) {
	w, err := s.b.watcher.Watch(ctx, &corev1.PodList{}, client.InNamespace(podStartNS), client.MatchingLabels(podruntime.Labels(s.name)))
	if err != nil {
		return 0, 0, err
	}
	defer w.Stop()
	began := time.Now()
	if err := s.scale(ctx, 1); err != nil {
		return 0, 0, err
	}
	pod, err := untilPodReady(w)
	if err != nil {
		return 0, 0, err
	}
	podStart = time.Since(began)
	began = time.Now()
	sup, err := startSupervisor(ctx, s.p, &bridge.PodTunnel{Pods: staticPod{pod}, Token: s.creds.Token, Cert: s.creds.Cert})
	if err != nil {
		return 0, 0, err
	}
	cold = time.Since(began)
	if err := dispose(sup); err != nil {
		return 0, 0, err
	}
	if err := s.scale(ctx, 0); err != nil {
		return 0, 0, err
	}
	return podStart, cold, s.waitNoPod(ctx)
}

func (s *standalone) scale(ctx context.Context, replicas int32) error {
	d := &appsv1.Deployment{}
	if err := s.b.cluster.Client.Get(ctx, client.ObjectKey{Namespace: podStartNS, Name: podruntime.DeploymentName(s.name)}, d); err != nil {
		return err
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &replicas
	return s.b.cluster.Client.Patch(ctx, d, patch)
}

func (s *standalone) waitNoPod(ctx context.Context) error {
	deadline := time.Now().Add(timeout)
	for {
		var pods corev1.PodList
		if err := s.b.cluster.Client.List(ctx, &pods, client.InNamespace(podStartNS), client.MatchingLabels(podruntime.Labels(s.name))); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d Pods of %s left after %s", len(pods.Items), s.name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// untilPodReady reads w until a Pod not being deleted is Ready.
func untilPodReady(w watch.Interface) (bridge.PodInfo, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return bridge.PodInfo{}, errors.New("the watch ended")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
				return bridge.PodInfo{Name: p.Name, UID: string(p.UID), IP: p.Status.PodIP, Ready: true}, nil
			}
		case <-deadline:
			return bridge.PodInfo{}, fmt.Errorf("no Ready Pod after %s", timeout)
		}
	}
}

// ---------------------------------------------------------------------------

func (b *bench) printIdle() {
	r := &b.res.idle
	mb := func(v int64) string { return fmt.Sprintf("%.1f MB", float64(v)/(1<<20)) }
	perServer := (r.rssAfter - r.rssBefore) / int64(max(1, r.servers))
	fmt.Printf("| %d McpServers with idle.suspendAfterMs %d (cpu request %s, created in waves of %d) → all Idle | %d Idle | %d Pods | | 0 Pods | %s |\n",
		r.servers, flagSuspendAfter.Milliseconds(), cmp.Or(*flagFleetCPU, "50m"), *flagIdleWave, r.asleep, r.pods,
		report.YesNo(r.servers > 0 && r.asleep == r.servers && r.pods == 0))
	fmt.Printf("| of which: from the last creation to all Idle and their Pods gone | | %.1f s | | | |\n", r.allIdle.Seconds())
	if r.rssErr != "" {
		fmt.Printf("| manager RSS: %s before, %s with the %d idle servers | | | | | |\n", mb(r.rssBefore), r.rssErr, r.servers)
	} else {
		fmt.Printf("| manager RSS: %s before, %s with the %d idle servers | | %s per idle server | | | |\n",
			mb(r.rssBefore), mb(r.rssAfter), r.servers, mb(perServer))
	}
}

func (b *bench) printWakes() {
	r := &b.res.idle
	p50 := func(xs []time.Duration) time.Duration { return report.Percentile(xs, 50) }
	p90 := func(xs []time.Duration) time.Duration { return report.Percentile(xs, 90) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	goal := p50(r.podStarts) + p50(r.colds) + wakeSlack
	fmt.Printf("| the node's Pod start: a standalone server Deployment scaled 0 → 1 → its Pod Ready (watch) | %d | %s | %s | | |\n",
		len(r.podStarts), ms(p50(r.podStarts)), ms(p90(r.podStarts)))
	fmt.Printf("| the server's cold start in that Pod (tunnel, spawn, initialize, tools/list) | %d | %s | %s | | |\n",
		len(r.colds), ms(p50(r.colds)), ms(p90(r.colds)))
	fmt.Printf("| first tools/call through the gateway to a sleeping server → its answer | %d | %s | %s | p50 ≤ %s (Pod start + cold start + 100 ms) | %s |\n",
		len(r.wakes), ms(p50(r.wakes)), ms(p90(r.wakes)), ms(goal), report.YesNo(len(r.wakes) > 0 && p50(r.wakes) <= goal))
	fmt.Printf("| manager container restarts: %d before the idle row, %d after the last wake | | | | | |\n", r.restartsBefore, r.restartsAfter)
}

// gatewayClient is an agent's HTTP client for config/default's gateway: it
// trusts only the CA the manager published in benchNS's ConfigMap
// mcpbridge-gateway-ca and sends token.
func gatewayClient(ctx context.Context, c client.Client, managerNS, token string) (*http.Client, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: benchNS, Name: "mcpbridge-gateway-ca"}, &cm); err != nil {
		return nil, fmt.Errorf("the gateway's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
		return nil, errors.New("the gateway's CA ConfigMap holds no certificate")
	}
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: "mcpbridge-gateway." + managerNS + ".svc"}
	return &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, &http.Transport{TLSClientConfig: tlsConfig})}, nil
}
