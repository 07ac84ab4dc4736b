package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/kubeauth"
)

// The gateway's shared-cluster rules, against the real apiserver's
// TokenReviews and SubjectAccessReviews. See docs/design.md, "Shared-cluster
// rules".
var _ = Describe("Gateway in a shared cluster", func() {
	BeforeEach(ensureGatewayUserRole)

	It("accepts only tokens made for its audience, which in turn do not work against the apiserver", func(ctx SpecContext) {
		ns := newNamespace()
		gatewayToken := saToken(ns, "agent", ns)
		Expect(rawPost(ns, tokenFor(ns, "agent"))).To(Equal(http.StatusUnauthorized), "a token for the apiserver")
		Expect(rawPost(ns, tokenFor(ns, "agent", "someone-else"))).To(Equal(http.StatusUnauthorized), "a token for another audience")
		Expect(rawPost(ns, gatewayToken)).To(Equal(http.StatusOK), "a token for mcpbridge.dev")

		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = gatewayToken
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		err = c.List(ctx, &corev1.ServiceAccountList{}, client.InNamespace(ns))
		Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the gateway's token against the apiserver: %v", err)
	})

	DescribeTable("shows and calls only the McpServers a caller may use by name", func(ctx SpecContext, protocol string) {
		ns := newNamespace()
		tools := map[string][]string{}
		for _, name := range []string{"alpha", "beta", "gamma"} {
			Expect(k8s.Create(ctx, stdioServer(ns, name))).To(Succeed())
		}
		for _, name := range []string{"alpha", "beta", "gamma"} {
			tools[name] = toolNames(readyAt(ns, name, 1))
		}
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})).To(Succeed())
		alphaBinding := useByName(ns, "agent", "alpha")
		useByName(ns, "agent", "gamma")
		var changes atomic.Int32
		token := tokenFor(ns, "agent", gatewayAudience)
		agent := connectAgent(ns, token, &changes, protocol)

		Expect(listToolNames(agent)).To(ConsistOf(append(slices.Clone(tools["alpha"]), tools["gamma"]...)),
			"exactly the tools of alpha and gamma")
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__alpha__echo", Arguments: map[string]any{"text": "hi"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(textOf(res)).To(Equal("hi"))
		expectAnsweredAsUnknown(agent, "mcp__beta__echo")
		expectRawAnswerAsUnknown(ns, token, "mcp__beta__echo")

		// Removing a binding takes effect once the cached answer expires
		// (gatewayAllowTTL) and the next round runs (gatewayRevalidate):
		// the agent is told (list_changed), lists and calls without alpha.
		seen := changes.Load()
		Expect(k8s.Delete(ctx, alphaBinding)).To(Succeed())
		removed := time.Now()
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">", seen), "list_changed after the binding went")
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).
			Should(ConsistOf(tools["gamma"]))
		took := time.Since(removed)
		fmt.Fprintf(GinkgoWriter, "the removed binding took effect after %s (allow TTL %s, revalidation every %s)\n",
			took, gatewayAllowTTL, gatewayRevalidate)
		// One-sided, against the configured timing: the answer cached by the
		// calls just before the removal would, at the product's default TTL,
		// hold it back for about that TTL. How soon after the configured
		// TTL and round it shows depends on the machine: not asserted.
		Expect(took).To(BeNumerically("<", kubeauth.DefaultAllowTTL),
			"the removal waited as long as the default TTL, not the configured %s", gatewayAllowTTL)
		expectAnsweredAsUnknown(agent, "mcp__alpha__echo")
		expectRawAnswerAsUnknown(ns, token, "mcp__alpha__echo")
	},
		Entry("on 2026-07-28", "2026-07-28"),
		Entry("on 2025-11-25", "2025-11-25"),
	)

	It("tells each client only about changes of the tools it may use", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "alpha"))).To(Succeed())
		readyAt(ns, "alpha", 1)
		var wide, narrow atomic.Int32
		wideAgent := connectAgent(ns, saToken(ns, "wide", ns), &wide)
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "narrow"}})).To(Succeed())
		useByName(ns, "narrow", "alpha")
		narrowAgent := connectAgent(ns, tokenFor(ns, "narrow", gatewayAudience), &narrow, "2025-11-25")
		Expect(listToolNames(wideAgent)).To(ContainElement("mcp__alpha__echo"))
		Expect(listToolNames(narrowAgent)).To(ContainElement("mcp__alpha__echo"))
		wideSeen, narrowSeen := wide.Load(), narrow.Load()

		Expect(k8s.Create(ctx, stdioServer(ns, "beta"))).To(Succeed())
		readyAt(ns, "beta", 1)
		Eventually(wide.Load, eventuallyTimeout, poll).Should(BeNumerically(">", wideSeen), "the namespace-wide agent is told")
		Eventually(func() []string { return listToolNames(wideAgent) }, eventuallyTimeout, poll).Should(ContainElement("mcp__beta__echo"))
		// Longer than a revalidation and a cache lifetime together.
		Consistently(narrow.Load, gatewayAllowTTL+2*gatewayRevalidate, poll).Should(Equal(narrowSeen), "the agent allowed alpha only is not told")
		Expect(listToolNames(narrowAgent)).NotTo(ContainElement("mcp__beta__echo"))

		// A session belongs to its caller: another token cannot use it.
		Expect(sessionPost(ns, saToken(ns, "stranger", ns), narrowAgent.ID())).To(Equal(http.StatusNotFound))
		Expect(sessionPost(ns, tokenFor(ns, "narrow", gatewayAudience), narrowAgent.ID())).To(Equal(http.StatusOK))
	})

	It("lets a caller allowed McpServers by name connect before they publish, and tells it when they do", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "stalled", "--stall-initialize"))).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})).To(Succeed())
		token := tokenFor(ns, "agent", gatewayAudience)
		Expect(rawPost(ns, token)).To(Equal(http.StatusForbidden), "allowed nothing")
		useByName(ns, "agent", "stalled", "later")
		Eventually(func() int { return rawPost(ns, token) }, eventuallyTimeout, poll).Should(Equal(http.StatusOK),
			"allowed an McpServer that publishes nothing yet")

		var changes atomic.Int32
		agent := connectAgent(ns, token, &changes)
		Expect(listToolNames(agent)).To(BeEmpty())
		Expect(k8s.Create(ctx, stdioServer(ns, "later"))).To(Succeed())
		Eventually(changes.Load, eventuallyTimeout, poll).Should(BeNumerically(">", 0))
		Eventually(func() []string { return listToolNames(agent) }, eventuallyTimeout, poll).Should(ContainElement("mcp__later__echo"))
	})

	It("writes one audit line per tools/call and never an argument or a result", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		Expect(k8s.Create(ctx, stdioServer(ns, "other"))).To(Succeed())
		readyAt(ns, "fx", 1)
		readyAt(ns, "other", 1)
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})).To(Succeed())
		useByName(ns, "agent", "fx")
		agent := connectAgent(ns, tokenFor(ns, "agent", gatewayAudience), nil)

		secret := "sk-live-" + randomHex(16)
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": secret}})
		Expect(err).NotTo(HaveOccurred())
		Expect(textOf(res)).To(Equal(secret), "the result holds the secret too")
		_, err = agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__other__echo", Arguments: map[string]any{"text": secret}})
		Expect(err).To(HaveOccurred())

		user := "system:serviceaccount:" + ns + ":agent"
		line := func(tool, server, outcome string) *regexp.Regexp {
			return regexp.MustCompile(`gateway\.audit\ttools/call\t\{"namespace": "` + ns + `", "user": "` + regexp.QuoteMeta(user) +
				`", "tool": "` + tool + `", "server": "` + server + `", "outcome": "` + outcome + `", "durationSeconds": [0-9.e-]+\}`)
		}
		Eventually(managerLog.String, eventuallyTimeout, poll).Should(MatchRegexp(line("mcp__fx__echo", "fx", "success").String()))
		Eventually(managerLog.String, eventuallyTimeout, poll).Should(MatchRegexp(line("mcp__other__echo", "other", "denied").String()))
		Expect(line("mcp__fx__echo", "fx", "success").FindAllString(managerLog.String(), -1)).To(HaveLen(1), "one line per call")
		Expect(managerLog.String()).NotTo(ContainSubstring(secret))
	})

	It("refuses malformed, foreign and expired tokens without a TokenReview, and reviews forged ones at most at the per-address limit while an agent keeps working", func(ctx SpecContext) {
		ns := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(ns, "fx"))).To(Succeed())
		readyAt(ns, "fx", 1)
		agent := connectAgent(ns, saToken(ns, "agent", ns), nil)
		_, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "warm"}})
		Expect(err).NotTo(HaveOccurred())
		stop, agentCalls, agentFailures, agentDone := callInLoop(agent)

		// Refused locally: no TokenReview, whatever the rate.
		apiToken := tokenFor(ns, "agent") // a real token, for the apiserver's audience
		before := tokenReviews.Load()
		start := time.Now()
		statuses := flood(ns, 300, func(i int) string {
			switch i % 3 {
			case 0:
				return randomHex(32)
			case 1:
				return apiToken
			}
			return forgedToken(gatewayAudience, time.Now().Add(-time.Hour))
		})
		Expect(statuses).To(Equal(map[int]int{http.StatusUnauthorized: 300}))
		localReviews := tokenReviews.Load() - before
		Expect(localReviews).To(BeNumerically("<=", agentReviewsIn(time.Since(start))), "only the agent's own token, when its answer expires")

		// Well-formed, for the audience, unexpired: reviewed, at most at the
		// limit of one address.
		before = tokenReviews.Load()
		start = time.Now()
		statuses = flood(ns, 1000, func(int) string { return forgedToken(gatewayAudience, time.Now().Add(time.Hour)) })
		elapsed := time.Since(start)
		reviews := tokenReviews.Load() - before
		close(stop)
		<-agentDone

		bound := int64(kubeauth.DefaultReviewSourceBurst) + int64(math.Ceil(kubeauth.DefaultReviewsPerSourcePerSecond*elapsed.Seconds()))
		fmt.Fprintf(GinkgoWriter, "1000 requests with forged tokens in %s: %d TokenReviews (bound %d), statuses %v; the agent made %d calls, %d failed\n",
			elapsed.Round(time.Millisecond), reviews, bound, statuses, agentCalls.Load(), agentFailures.Load())
		Expect(statuses[http.StatusUnauthorized] + statuses[http.StatusTooManyRequests]).To(Equal(1000))
		Expect(statuses[http.StatusTooManyRequests]).To(BeNumerically(">", 0))
		Expect(int64(statuses[http.StatusUnauthorized])).To(BeNumerically("<=", bound))
		Expect(reviews).To(BeNumerically("<=", bound+agentReviewsIn(elapsed)))
		Expect(refusalCount("", "token_reviews_per_source")).To(BeNumerically(">=", statuses[http.StatusTooManyRequests]))
		Expect(agentCalls.Load()).To(BeNumerically(">", 0))
		Expect(agentFailures.Load()).To(BeZero())
	})

	It("refuses a denied identity looping over many McpServers, naming the limit, while another tenant's agent keeps calling", func(ctx SpecContext) {
		crowded := newNamespace()
		for i := range 40 { // Invalid (over the suite's ceiling): listed, but no process
			obj := stdioServer(crowded, fmt.Sprintf("s%02d", i))
			obj.Spec.ToolCallTimeoutMs = ptr32(2 * 3_600_000)
			Expect(k8s.Create(ctx, obj)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var list v1alpha1.McpServerList
			g.Expect(mgrCache.List(ctx, &list, client.InNamespace(crowded))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(40))
		}, eventuallyTimeout, poll).Should(Succeed())
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: crowded, Name: "looper"}})).To(Succeed())
		looper := tokenFor(crowded, "looper", gatewayAudience)

		victimNS := newNamespace()
		Expect(k8s.Create(ctx, stdioServer(victimNS, "fx"))).To(Succeed())
		readyAt(victimNS, "fx", 1)
		victim := connectAgent(victimNS, saToken(victimNS, "agent", victimNS), nil)
		stop, victimCalls, victimFailures, victimDone := callInLoop(victim)

		// The first request reviews 32 of the 40 servers and stops there.
		code, body := postForBody(crowded, looper)
		Expect(code).To(Equal(http.StatusTooManyRequests))
		Expect(body).To(ContainSubstring("per-request bound of access reviews"))
		// Looping, as the denials expire, it runs out of reviews.
		Eventually(func() string {
			_, body := postForBody(crowded, looper)
			return body
		}, eventuallyTimeout, 10*time.Millisecond).Should(ContainSubstring("SubjectAccessReview rate limit"))
		close(stop)
		<-victimDone

		fmt.Fprintf(GinkgoWriter, "the victim made %d calls meanwhile, %d failed\n", victimCalls.Load(), victimFailures.Load())
		Expect(victimCalls.Load()).To(BeNumerically(">", 0))
		Expect(victimFailures.Load()).To(BeZero())
		Expect(refusalCount(crowded, "access_reviews_per_request")).To(BeNumerically(">", 0))
		Expect(refusalCount(crowded, "access_reviews_per_identity")).To(BeNumerically(">", 0))
	})
})

// callInLoop calls the echo tool of fx with agent until stop is closed;
// done is closed when it has stopped.
func callInLoop(agent *mcp.ClientSession) (stop chan struct{}, calls, failures *atomic.Int32, done chan struct{}) {
	stop, done = make(chan struct{}), make(chan struct{})
	calls, failures = &atomic.Int32{}, &atomic.Int32{}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := agent.CallTool(context.Background(), &mcp.CallToolParams{Name: "mcp__fx__echo", Arguments: map[string]any{"text": "x"}})
			if err != nil || res.IsError {
				failures.Add(1)
			}
			calls.Add(1)
		}
	}()
	return stop, calls, failures, done
}

// flood sends n initialize requests with token(i) from 25 senders and
// counts the statuses.
func flood(ns string, n int, token func(i int) string) map[int]int {
	const senders = 25
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := s; i < n; i += senders {
				code := postWithToken(hc, ns, token(i))
				mu.Lock()
				statuses[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return statuses
}

// agentReviewsIn is how many times an agent's own token may be reviewed in
// d: whenever its cached answer (gatewayAllowTTL) expires, outside the
// limits on new tokens; a loaded machine stretches a run past the TTL.
func agentReviewsIn(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()/gatewayAllowTTL.Seconds())) + 1
}

// forgedToken is an unsigned JWT of a ServiceAccount token's shape for
// audience, expiring at exp: the gateway cannot tell it from a real one
// without a TokenReview.
func forgedToken(audience string, exp time.Time) string {
	enc := func(v any) string {
		b, err := json.Marshal(v)
		Expect(err).NotTo(HaveOccurred())
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "kid": randomHex(8)}) + "." +
		enc(map[string]any{"aud": []string{audience}, "exp": exp.Unix(), "sub": "system:serviceaccount:x:" + randomHex(8)}) +
		"." + base64.RawURLEncoding.EncodeToString([]byte(randomHex(64)))
}

// postForBody sends an initialize request with token and returns the
// status and the body.
func postForBody(ns, token string) (int, string) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	if resp.StatusCode == http.StatusTooManyRequests {
		Expect(resp.Header.Get("Retry-After")).NotTo(BeEmpty())
	}
	return resp.StatusCode, string(b)
}

// refusalCount reads mcpbridge_gateway_refusals_total{namespace,limit}.
func refusalCount(ns, limit string) int {
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "mcpbridge_gateway_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["limit"] == limit {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// useByName lets ServiceAccount ns/sa use the McpServers named, through a
// Role with resourceNames, and returns the binding.
func useByName(ns, sa string, servers ...string) *rbacv1.RoleBinding {
	ctx := context.Background()
	name := sa + "-use-" + strings.Join(servers, "-")
	Expect(k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"mcpbridge.dev"}, Resources: []string{"mcpservers"},
			Verbs: []string{"use"}, ResourceNames: servers}},
	})).To(Succeed())
	b := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
	}
	Expect(k8s.Create(ctx, b)).To(Succeed())
	for _, server := range servers {
		waitMayUse(ns, ns, sa, server)
	}
	return b
}

// expectAnsweredAsUnknown: calling tool gets word for word the answer of a
// tool that does not exist.
func expectAnsweredAsUnknown(agent *mcp.ClientSession, tool string) {
	const missing = "mcp__nosuchserver__echo"
	_, errTool := agent.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
	_, errMissing := agent.CallTool(context.Background(), &mcp.CallToolParams{Name: missing, Arguments: map[string]any{"text": "x"}})
	Expect(errTool).To(HaveOccurred())
	Expect(errMissing).To(HaveOccurred())
	Expect(errTool.Error()).To(Equal(strings.ReplaceAll(errMissing.Error(), missing, tool)))
}

// expectRawAnswerAsUnknown: a sessionless tools/call of tool gets, byte for
// byte, the HTTP answer of a tool that does not exist (the name aside).
func expectRawAnswerAsUnknown(ns, token, tool string) {
	const missing = "mcp__nosuchserver__echo"
	code, ct, body := sessionlessCall(ns, token, tool)
	codeMissing, ctMissing, bodyMissing := sessionlessCall(ns, token, missing)
	Expect(bodyMissing).To(ContainSubstring(missing), "the answer names the tool")
	Expect([]any{code, ct, body}).To(Equal([]any{codeMissing, ctMissing, strings.ReplaceAll(bodyMissing, missing, tool)}))
}

// sessionlessCall posts a well-formed 2026-07-28 tools/call of tool with
// token and returns the status, content type and body.
func sessionlessCall(ns, token, tool string) (int, string, string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":%q,"arguments":{"text":"x"},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"}}}}`, tool)
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool, "Authorization": "Bearer " + token} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// postWithToken sends an initialize request with token and returns the
// status.
func postWithToken(hc *http.Client, ns, token string) int {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/namespaces/"+ns+"/mcp", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// sessionPost sends tools/list in session sid with token and returns the
// status.
func sessionPost(ns, token, sid string) int {
	req, err := http.NewRequest(http.MethodPost, gatewayURL+"/namespaces/"+ns+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
