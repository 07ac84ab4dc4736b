// Command isolation measures whether one tenant can take the gateway from
// another (docs/design.md, "Budgets"): a victim's agent calls its tenant's echo
// tool at a steady rate, first alone and then while an attacker in another
// namespace floods the gateway for the same time, and it prints a markdown
// table with the command that reproduces it: the victim's p50/p99 and
// failures in both runs, what the attacker got, and the peak heap and RSS
// (goal: victim p99 ≤ 2× unloaded, 0 failures, RSS under the manager's
// 512 MiB limit).
//
//	go run ./hack/bench/isolation [-duration=20s] [-rate=50] [-sessions=1] [-oversized=64] [-flooders=16]
//
// The fixtures run as separate processes (--http=127.0.0.1:0): the victim's
// plain one and the attacker's hostile one (--big-result --slow-body, a
// 12 MiB answer that arrives 1 MiB every 500 ms).
// The gateway (--gateway-auth=none, the default budgets), the supervisors
// and the load-generating clients run in this process, so the heap and RSS
// are the gateway's and the clients' together. The attacks, all at once:
// -sessions loops of initialize; -oversized agents that call the slow 12 MiB
// tool without pause; -flooders agents that call the hostile server's sleep
// tool (1 s) without pause. Token
// floods and per-server authorization fan-out need token authentication and
// are not part of this program.
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
// See docs/design.md, "Budgets".
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

var (
	flagDuration = flag.Duration("duration", 20*time.Second, "length of each run (unloaded, then under attack)")
	flagRate     = flag.Int("rate", 50, "victim calls per second")
	flagSessions = flag.Int("sessions", 1, "attacker loops of initialize")
	flagUnread   = flag.Int("oversized", 64, "attacker agents that call the slow 12 MiB tool without pause")
	flagFlooders = flag.Int("flooders", 16, "attacker agents that call a 1 s tool without pause")
	flagFixture  = flag.String("fixture", "", "path of a prebuilt mcp-fixture (default: go build into a temp dir)")
)

const (
	bigResult   = 12 << 20
	memoryLimit = 512 << 20 // the manager's limit in config/default and the chart
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "isolation:", err)
		os.Exit(1)
	}
}

func run() error {
	loadBefore := report.LoadAvg()
	bin := *flagFixture
	if bin == "" {
		dir, err := os.MkdirTemp("", "isolation-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "mcp-fixture")
		if err := testenv.Build(bin, "./test/fixture/cmd/mcp-fixture"); err != nil {
			return err
		}
	}
	victimFx, err := startFixture(bin, "--stateless")
	if err != nil {
		return err
	}
	defer victimFx.stop()
	hostileFx, err := startFixture(bin, "--stateless", "--big-result="+strconv.Itoa(bigResult), "--slow-body=500ms")
	if err != nil {
		return err
	}
	defer hostileFx.stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, stop, err := startGateway(ctx, map[string]string{"tenant": victimFx.url, "attacker": hostileFx.url})
	if err != nil {
		return err
	}
	defer stop()
	victimURL, attackerURL := base+"/namespaces/tenant/mcp", base+"/namespaces/attacker/mcp"

	mem := &memPeak{}
	unloaded := runVictim(victimURL, *flagDuration, mem)
	mem.reset()
	att := startAttack(attackerURL)
	loaded := runVictim(victimURL, *flagDuration, mem)
	att.stop()
	printTable(unloaded, loaded, att, mem, loadBefore)
	return nil
}

// ---- processes and the gateway ----------------------------------------------

type fixtureProc struct {
	cmd *exec.Cmd
	url string
}

func startFixture(bin string, args ...string) (*fixtureProc, error) {
	cmd := exec.Command(bin, append([]string{"--http=127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fx := &fixtureProc{cmd: cmd}
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		fx.stop()
		return nil, fmt.Errorf("fixture announced %q: %v", line, err)
	}
	fx.url = url
	return fx, nil
}

func (fx *fixtureProc) stop() {
	_ = fx.cmd.Process.Signal(syscall.SIGTERM)
	_ = fx.cmd.Wait()
}

// startGateway supervises one server per namespace ("tools" in each) and
// serves the gateway with the default budgets on a loopback port; it
// returns once every server is Ready.
func startGateway(ctx context.Context, upstreams map[string]string) (string, func(), error) {
	reg := registry.New()
	var sups []*bridge.Supervisor
	for ns, url := range upstreams {
		p := &policy.Policy{ServerName: "tools", Transport: v1alpha1.TransportStreamableHTTP, HTTP: &policy.HTTP{URL: url},
			ToolCallTimeout: 30 * time.Second, ConnectionTimeout: 10 * time.Second,
			Reconnect: policy.Reconnect{Enabled: true, InitialDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxAttempts: 10}}
		sup := bridge.New(bridge.Options{Namespace: ns, Name: "tools", Policy: p, Registry: reg, Log: logr.Discard(),
			Egress: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})})
		sup.Start(ctx)
		sups = append(sups, sup)
	}
	g := &gateway.Gateway{Registry: reg, Log: logr.Discard()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.Start(ctx) }()
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		for _, s := range sups {
			_ = s.Dispose(sctx)
		}
	}
	for _, s := range sups {
		deadline := time.Now().Add(30 * time.Second)
		for s.Snapshot().Phase != v1alpha1.PhaseReady {
			if time.Now().After(deadline) {
				stop()
				return "", nil, fmt.Errorf("a supervisor is not Ready: %+v", s.Snapshot().LastError)
			}
			select {
			case <-s.Changes():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// ---- the victim --------------------------------------------------------------

type victimRun struct {
	lat      []time.Duration
	failures int
	firstErr string
}

// runVictim calls echo at -rate for d, one call at a time (a tick that
// finds the previous call still running is skipped), and samples mem.
func runVictim(url string, d time.Duration, mem *memPeak) victimRun {
	var r victimRun
	hc := &http.Client{Timeout: 30 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(*flagRate))
	defer tick.Stop()
	sample := time.NewTicker(100 * time.Millisecond)
	defer sample.Stop()
	end := time.After(d)
	for i := 0; ; i++ {
		select {
		case <-end:
			return r
		case <-sample.C:
			mem.sample()
		case <-tick.C:
			start := time.Now()
			body, err := call(hc, url, i, "echo", `{"text":"still here"}`)
			switch {
			case err != nil:
				r.failures++
				r.firstErr = cmpOr(r.firstErr, err.Error())
			case !strings.Contains(body, "still here") || strings.Contains(body, `"isError":true`):
				r.failures++
				r.firstErr = cmpOr(r.firstErr, fmt.Sprintf("%.200s", body))
			default:
				r.lat = append(r.lat, time.Since(start))
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// call posts a sessionless (2026-07-28) tools/call of tools' tool and reads
// the answer.
func call(hc *http.Client, url string, id int, tool, args string) (string, error) {
	resp, err := post(hc, url, callBody(id, tool, args), callHeaders(tool))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	return string(b), err
}

func callBody(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"mcp__tools__%s","arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"}}}}`, id, tool, args, registry.SessionlessProtocol)
}

func callHeaders(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/call",
		"Mcp-Name": "mcp__tools__" + tool}
}

func post(hc *http.Client, url, body string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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

// ---- the attacker ------------------------------------------------------------

type attack struct {
	done                      chan struct{}
	wg                        sync.WaitGroup
	sessionsOK, sessions429   atomic.Int64
	held, refusedBytes, calls atomic.Int64
	refusedCalls, otherErrors atomic.Int64
	firstToolError            atomic.Pointer[string]
}

func startAttack(url string) *attack {
	a := &attack{done: make(chan struct{})}
	for range *flagSessions {
		a.loop(func(hc *http.Client, i int) { a.initialize(hc, url) })
	}
	for range *flagUnread {
		a.loop(func(hc *http.Client, i int) { a.unread(hc, url, i) })
	}
	for range *flagFlooders {
		a.loop(func(hc *http.Client, i int) { a.flood(hc, url, i) })
	}
	return a
}

// loop runs step until the attack stops, each loop on a connection of its own.
func (a *attack) loop(step func(*http.Client, int)) {
	a.wg.Go(func() {
		hc := &http.Client{Transport: &http.Transport{}, Timeout: 60 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-a.done:
				return
			default:
			}
			step(hc, i)
		}
	})
}

func (a *attack) initialize(hc *http.Client, url string) {
	resp, err := post(hc, url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{},"clientInfo":{"name":"attacker","version":"0"}}}`, nil)
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		a.sessions429.Add(1)
	} else {
		a.sessionsOK.Add(1)
	}
}

// unread calls the slow 12 MiB tool and reads the answer or the refusal.
func (a *attack) unread(hc *http.Client, url string, i int) {
	resp, err := post(hc, url, callBody(i, fixtureBig, `{}`), callHeaders(fixtureBig))
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	if resp.ContentLength > 64<<10 {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.held.Add(1)
		return
	}
	a.countRefusal(resp)
}

func (a *attack) flood(hc *http.Client, url string, i int) {
	resp, err := post(hc, url, callBody(i, "sleep", `{"ms":1000}`), callHeaders("sleep"))
	if err != nil {
		a.otherErrors.Add(1)
		return
	}
	a.countRefusal(resp)
}

func (a *attack) countRefusal(resp *http.Response) {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := string(b)
	switch {
	case strings.Contains(s, gateway.FlagMaxResultBytesPerNamespace):
		a.refusedBytes.Add(1)
	case strings.Contains(s, "-inflight-calls-"):
		a.refusedCalls.Add(1)
	case strings.Contains(s, `"result"`):
		a.calls.Add(1)
		if strings.Contains(s, `"isError":true`) {
			a.firstToolError.CompareAndSwap(nil, &s)
		}
	default:
		a.otherErrors.Add(1)
	}
}

func (a *attack) stop() {
	close(a.done)
	a.wg.Wait()
}

const fixtureBig = "big"

// ---- memory ------------------------------------------------------------------

type memPeak struct{ heap, rss uint64 }

func (m *memPeak) reset() { m.heap, m.rss = 0, 0 }

func (m *memPeak) sample() {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	m.heap = max(m.heap, s[0].Value.Uint64())
	m.rss = max(m.rss, rss())
}

// rss is the resident set of this process (VmRSS), in bytes.
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ---- the table -----------------------------------------------------------------

func printTable(unloaded, loaded victimRun, a *attack, mem *memPeak, loadBefore string) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	p := func(r victimRun, q float64) time.Duration { return report.Percentile(r.lat, q) }
	fmt.Printf("`go run ./hack/bench/isolation -duration=%s -rate=%d -sessions=%d -oversized=%d -flooders=%d`"+
		" (load average %s before, %s after)\n\n", *flagDuration, *flagRate, *flagSessions, *flagUnread, *flagFlooders,
		loadBefore, report.LoadAvg())
	fmt.Println("| Victim run | Calls | Failures | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		run  victimRun
	}{{"unloaded", unloaded}, {"under attack", loaded}} {
		fmt.Printf("| %s | %d | %d | %s | %s |\n", r.name, len(r.run.lat), r.run.failures, ms(p(r.run, 50)), ms(p(r.run, 99)))
	}
	fmt.Println()
	fmt.Printf("Attacker: %d sessions opened, %d initialize refused with 429; %d answers of 12 MiB received, %d calls refused "+
		"by the result-byte budget, %d by the in-flight budgets, %d answered, %d other errors.\n\n",
		a.sessionsOK.Load(), a.sessions429.Load(), a.held.Load(), a.refusedBytes.Load(), a.refusedCalls.Load(),
		a.calls.Load(), a.otherErrors.Load())
	fmt.Println("| Goal (docs/design.md, Budgets) | Measured | Met |")
	fmt.Println("|---|---|---|")
	ratio := float64(p(loaded, 99)) / float64(max(p(unloaded, 99), 1))
	fmt.Printf("| victim p99 under attack ≤ 2× unloaded | %.2f× | %s |\n", ratio, report.YesNo(ratio <= 2))
	fmt.Printf("| victim failures under attack = 0 | %d | %s |\n", loaded.failures, report.YesNo(loaded.failures == 0))
	fmt.Printf("| peak RSS (gateway and load generators) under the manager's %d MiB limit | %d MiB (heap objects %d MiB) | %s |\n",
		memoryLimit>>20, mem.rss>>20, mem.heap>>20, report.YesNo(mem.rss < memoryLimit))
	if e := a.firstToolError.Load(); e != nil {
		fmt.Printf("\nFirst tool error the attacker got: %.300s\n", *e)
	}
	if loaded.firstErr != "" {
		fmt.Printf("\nFirst victim failure under attack: %s\n", loaded.firstErr)
	}
}
