package manager_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// TestOneTenantCannotTakeTheManagerFromAnother runs the manager binary with
// small budgets while one tenant attacks it from its namespace: a loop of
// initialize, more calls than its budget, oversized results that its
// slow upstream sends, and more tool bytes than its namespace may publish. The attacker
// gets the documented refusals, the other tenant's agent keeps succeeding
// meanwhile, and the manager's heap stays bounded (from its /metrics).
// See docs/design.md, "Budgets".
func TestOneTenantCannotTakeTheManagerFromAnother(t *testing.T) {
	const (
		bigResult = 12 << 20  // the hostile upstream's answer, 1 MiB every 500 ms
		attackers = 16        // agents that call it at once, 14 of them admitted
		heapBound = 140 << 20 // without the result budget: 14 answers of 12 MiB live at once
	)
	attacker, tenant := newNamespace(t, "attacker-"), newNamespace(t, "tenant-")
	createHTTPServer(t, attacker, "hostile", serveFixture(t, fixture.Options{BigResult: bigResult, SlowBody: 500 * time.Millisecond}))
	createHTTPServer(t, attacker, "bloated", serveFixture(t, fixture.Options{Tools: 400, SchemaBytes: 4000}))
	createHTTPServer(t, tenant, "tools", serveFixture(t, fixture.Options{}))

	probes, metrics, gw := freeAddr(t), freeAddr(t), freeAddr(t)
	// The heap bound is about what is live, not how far the GC lets
	// garbage grow: collect at +25% (Go's default is +100%).
	t.Setenv("GOGC", "25")
	startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--health-probe-bind-address="+probes,
		"--metrics-bind-address="+metrics, "--metrics-secure=false", "--gateway-bind-address="+gw, "--gateway-auth=none", "--gateway-tls=false",
		"--upstream-allow-cidrs=127.0.0.0/8",
		"--gateway-max-sessions-per-identity=4", "--gateway-max-inflight-calls-per-identity=14",
		"--gateway-max-inflight-calls-per-namespace=14", "--gateway-max-result-bytes-per-namespace=16Mi",
		"--max-tool-bytes-per-namespace=1Mi")
	g := NewWithT(t)
	waitForPhase(t, attacker, "hostile", v1alpha1.PhaseReady)
	waitForPhase(t, tenant, "tools", v1alpha1.PhaseReady)

	// Tool bytes: the bloated server publishes nothing and says why.
	ready := waitForPhase(t, attacker, "bloated", v1alpha1.PhaseConflict)
	g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonToolBudgetExceeded))
	g.Expect(ready.Message).To(ContainSubstring("--max-tool-bytes-per-namespace"))

	victim := startVictim(t, "http://"+gw+"/namespaces/"+tenant+"/mcp")
	attackerURL := "http://" + gw + "/namespaces/" + attacker + "/mcp"

	// Sessions: the fifth initialize of one identity gets 429 and Retry-After.
	for i := range 5 {
		resp, err := post(ctx(t), http.DefaultClient, attackerURL, initializeRequest, nil)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i < 4 {
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "initialize %d: %s", i, body)
			continue
		}
		g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
		g.Expect(resp.Header.Get("Retry-After")).NotTo(BeEmpty())
		g.Expect(string(body)).To(ContainSubstring("--gateway-max-sessions-per-identity"))
	}

	// A 12 MiB answer fits the namespace's 16 MiB: alone, it comes through.
	single, hdr := sessionlessCall(100, "mcp__hostile__"+fixture.ToolBig, `{}`)
	resp, err := post(ctx(t), http.DefaultClient, attackerURL, single, hdr)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(b)).To(BeNumerically(">", bigResult), "a lone 12 MiB answer: %.200s", b)

	// Calls and result bytes: more agents than the call budget call that
	// tool at once, while the manager's heap is watched. Which of them
	// finish depends on how their bytes interleave; the others are refused
	// naming the budget, and the heap stays far below what 14 answers
	// held at once would take.
	var mu sync.Mutex
	var refusals []string
	peak := watchHeap(t, metrics)
	var wg sync.WaitGroup
	callCtx := ctx(t)
	for i := range attackers {
		wg.Go(func() {
			body, hdr := sessionlessCall(i, "mcp__hostile__"+fixture.ToolBig, `{}`)
			resp, err := post(callCtx, http.DefaultClient, attackerURL, body, hdr)
			var b []byte
			if err == nil {
				b, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				refusals = append(refusals, err.Error())
			case len(b) <= bigResult:
				refusals = append(refusals, string(b))
			}
		})
	}
	wg.Wait()
	maxHeap := peak()
	t.Logf("the manager's heap in use peaked at %.1f MiB", maxHeap/(1<<20))
	joined := strings.Join(refusals, "\n")
	g.Expect(joined).To(ContainSubstring("--gateway-max-result-bytes-per-namespace"))
	g.Expect(joined).To(ContainSubstring("--gateway-max-inflight-calls-per-identity"))
	g.Expect(maxHeap).To(BeNumerically("<", heapBound), "heap in use peaked at %d MiB", int(maxHeap)>>20)
	text := scrape(t, metrics)
	for _, limit := range []string{"sessions_per_identity", "calls_per_identity", "result_bytes_per_namespace"} {
		g.Expect(gauge(t, text, `mcpbridge_gateway_refusals_total{limit="`+limit+`",namespace="`+attacker+`"}`)).To(BeNumerically(">", 0), limit)
	}

	// The other tenant's agent succeeded throughout.
	ok, failures := victim.stop()
	g.Expect(failures).To(BeEmpty())
	g.Expect(ok).To(BeNumerically(">", 0))
}

// TestRequestsOfManySmallValuesCannotTakeTheManager: agents of one tenant
// send tools/list requests of 4 MiB of small objects in _meta, which the
// SDK would decode into about thirty times their bytes. Each is refused
// with 429 naming the bytes-held budget, the manager's heap stays far below
// what eight of them decoded at once would take, and the other tenant's
// agent keeps succeeding. See docs/design.md, "Budgets".
func TestRequestsOfManySmallValuesCannotTakeTheManager(t *testing.T) {
	const (
		agents    = 8
		each      = 3
		heapBound = 200 << 20 // without the budget: about 120 MiB a request decoded, 8 at once
	)
	attacker, tenant := newNamespace(t, "attacker-"), newNamespace(t, "tenant-")
	createHTTPServer(t, attacker, "tools", serveFixture(t, fixture.Options{}))
	createHTTPServer(t, tenant, "tools", serveFixture(t, fixture.Options{}))
	probes, metrics, gw := freeAddr(t), freeAddr(t), freeAddr(t)
	t.Setenv("GOGC", "25") // as above: the bound is about what is live
	startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--health-probe-bind-address="+probes,
		"--metrics-bind-address="+metrics, "--metrics-secure=false", "--gateway-bind-address="+gw, "--gateway-auth=none", "--gateway-tls=false",
		"--upstream-allow-cidrs=127.0.0.0/8")
	g := NewWithT(t)
	waitForPhase(t, attacker, "tools", v1alpha1.PhaseReady)
	waitForPhase(t, tenant, "tools", v1alpha1.PhaseReady)
	victim := startVictim(t, "http://"+gw+"/namespaces/"+tenant+"/mcp")
	attackerURL := "http://" + gw + "/namespaces/" + attacker + "/mcp"

	var pad strings.Builder
	for pad.Len() < 4<<20-512 {
		pad.WriteString(`{"a":1,"b":[2,3]},`)
	}
	heavy := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` +
		registry.SessionlessProtocol + `","io.modelcontextprotocol/clientCapabilities":{},"pad":[` + pad.String() + `0]}}}`
	hdr := map[string]string{"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/list"}
	peak := watchHeap(t, metrics)
	var mu sync.Mutex
	var answers []string
	var wg sync.WaitGroup
	for range agents {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{}} // a connection of its own
			for range each {
				resp, err := post(ctx(t), hc, attackerURL, heavy, hdr)
				answer := fmt.Sprint(err)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					answer = fmt.Sprintf("%d %s", resp.StatusCode, b)
				}
				mu.Lock()
				answers = append(answers, answer)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	maxHeap := peak()
	t.Logf("the manager's heap in use peaked at %.1f MiB", maxHeap/(1<<20))
	g.Expect(answers).To(HaveLen(agents * each))
	for _, a := range answers {
		g.Expect(a).To(HavePrefix("429 "))
		g.Expect(a).To(ContainSubstring("--gateway-max-result-bytes-per-namespace"))
	}
	g.Expect(maxHeap).To(BeNumerically("<", heapBound), "heap in use peaked at %d MiB", int(maxHeap)>>20)
	// Once one was refused, the others are refused before they are read.
	m := scrape(t, metrics)
	refused := 0.0
	for _, limit := range []string{"result_bytes_per_namespace", "large_bodies_per_namespace"} {
		n, _ := sample(m, `mcpbridge_gateway_refusals_total{limit="`+limit+`",namespace="`+attacker+`"}`) // 0 when none
		refused += n
	}
	g.Expect(refused).To(BeNumerically(">=", agents*each))

	ok, failures := victim.stop()
	g.Expect(failures).To(BeEmpty())
	g.Expect(ok).To(BeNumerically(">", 0))
}

const initializeRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` +
	`"capabilities":{},"clientInfo":{"name":"attacker","version":"0"}}}`

// sessionlessCall is a 2026-07-28 tools/call with the headers it needs.
func sessionlessCall(id int, tool, args string) (string, map[string]string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"}}}}`, id, tool, args, registry.SessionlessProtocol)
	return body, map[string]string{"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

// post sends an MCP POST and returns the response with its body unread.
func post(ctx context.Context, hc *http.Client, url, body string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return hc.Do(req)
}

// victimAgent calls its tenant's echo without pause until stopped.
type victimAgent struct {
	done     chan struct{}
	finished chan struct{}
	ok       int
	failures []string
}

func startVictim(t *testing.T, url string) *victimAgent {
	v := &victimAgent{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(v.finished)
		hc := &http.Client{Timeout: 30 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-v.done:
				return
			default:
			}
			body, hdr := sessionlessCall(i, "mcp__tools__echo", `{"text":"still here"}`)
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, val := range hdr {
				req.Header.Set(k, val)
			}
			resp, err := hc.Do(req)
			if err != nil {
				v.failures = append(v.failures, err.Error())
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("still here")) || bytes.Contains(b, []byte(`"isError":true`)) {
				v.failures = append(v.failures, fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, b))
				continue
			}
			v.ok++
		}
	}()
	t.Cleanup(func() { _, _ = v.stop() })
	return v
}

func (v *victimAgent) stop() (int, []string) {
	select {
	case <-v.done:
	default:
		close(v.done)
	}
	<-v.finished
	return v.ok, v.failures
}

func serveFixture(t *testing.T, o fixture.Options) string {
	t.Helper()
	fx, err := fixture.NewHTTPHandler(o)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(fx)
	t.Cleanup(func() {
		up.CloseClientConnections()
		up.Close()
		_ = fx.Close()
	})
	return up.URL + "/mcp"
}

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := env.Client.Create(ctx(t), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func createHTTPServer(t *testing.T, ns, name, url string) {
	t.Helper()
	obj := &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.McpServerSpec{
			Transport:      v1alpha1.TransportStreamableHTTP,
			StreamableHTTP: &v1alpha1.StreamableHTTPTransport{URL: url},
		},
	}
	if err := env.Client.Create(ctx(t), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
}

// waitForPhase waits for the McpServer's phase and returns its Ready
// condition.
func waitForPhase(t *testing.T, ns, name string, phase v1alpha1.Phase) metav1.Condition {
	t.Helper()
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		got := &v1alpha1.McpServer{}
		g.Expect(env.Client.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(phase))
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		ready = *c
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "%s/%s never reached %s", ns, name, phase)
	return ready
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	text, err := scrapeText(addr)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func scrapeText(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// gauge is the value of the sample written exactly as series in text.
func gauge(t *testing.T, text, series string) float64 {
	t.Helper()
	v, err := sample(text, series)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sample(text, series string) (float64, error) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0, fmt.Errorf("no sample %s in the metrics", series)
	}
	return strconv.ParseFloat(m[1], 64)
}

// watchHeap samples the manager's go_memstats_heap_inuse_bytes every 200 ms
// until the returned function is called, which returns the largest sample.
func watchHeap(t *testing.T, addr string) func() float64 {
	done, result := make(chan struct{}), make(chan float64, 1)
	go func() {
		peak := 0.0
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if text, err := scrapeText(addr); err == nil {
				if v, err := sample(text, "go_memstats_heap_inuse_bytes"); err == nil {
					peak = max(peak, v)
				}
			}
			select {
			case <-done:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop := func() float64 {
		once.Do(func() { close(done) })
		return <-result
	}
	t.Cleanup(func() { once.Do(func() { close(done) }) })
	return stop
}
