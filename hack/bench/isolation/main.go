// Command isolation measures whether one tenant can take the gateway from
// another (docs/design.md, "Budgets"): a victim's agent calls its tenant's echo
// tool at a steady rate, first alone and then while an attacker in another
// namespace floods the gateway for the same time, and it prints a markdown
// table with the command that reproduces it: the victim's p50/p99 and
// failures in both runs, what the attacker got, the gateway's scheduling
// latency and GC pauses under attack, and its peak heap and RSS (goal: victim p99 ≤ 2× unloaded, 0 failures, RSS under the manager's
// 512 MiB limit).
//
//	go run ./hack/bench/isolation [-duration=20s] [-rate=50] [-sessions=1] [-oversized=64] [-flooders=16] [-attacker-nice=19] [-cpuprofile=FILE]
//
// The fixtures run as separate processes (--http=127.0.0.1:0): the victim's
// plain one and the attacker's hostile one (--big-result --slow-body, a
// 12 MiB answer that arrives 1 MiB every 500 ms).
// The gateway (--gateway-auth=none, the default budgets, the Go memory limit
// the manager sets in its 512 MiB container) and the supervisors run in this
// process, so the heap, RSS and runtime histograms are the gateway's; the
// victim's agent and the attacker's agents run in processes of their own
// (this program with -role), as agents run in Pods of their own. They share
// this machine's cores with the gateway, which a cluster's agents would
// not: the attacker's agents and its upstream run at -attacker-nice, and at
// 19 they take only the CPU the gateway and the victim leave idle. The
// attacks, all at once: -sessions loops of initialize; -oversized agents
// that call the slow 12 MiB tool without pause; -flooders agents that call
// the hostile server's sleep tool (1 s) without pause. Token floods,
// per-server authorization fan-out and list_changed storms need token
// authentication or a storming upstream and are not part of this program.
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
// See docs/design.md, "Budgets".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
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
	flagRole     = flag.String("role", "", "internal: run as the victim's or the attacker's agents (victim|attacker) against -url and print what they saw as JSON")
	flagURL      = flag.String("url", "", "internal: the gateway endpoint of -role")
	flagNice     = flag.Int("attacker-nice", 19, "the nice value of the attacker's agents and of its upstream: at 19 they take the CPU the gateway and the victim leave idle, as the attacker's Pods would not take the gateway's cores")
	flagProfile  = flag.String("cpuprofile", "", "write a CPU profile of the gateway's process during the attack to `FILE`")
)

const (
	bigResult   = 12 << 20
	memoryLimit = 512 << 20 // the manager's limit in config/default and the chart
)

func main() {
	flag.Parse()
	run := run
	switch *flagRole {
	case "victim":
		run = func() error { return json.NewEncoder(os.Stdout).Encode(runVictim(*flagURL, *flagDuration)) }
	case "attacker":
		run = runAttacker
	}
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
	victimFx, err := startFixture(0, bin, "--stateless")
	if err != nil {
		return err
	}
	defer victimFx.stop()
	hostileFx, err := startFixture(*flagNice, bin, "--stateless", "--big-result="+strconv.Itoa(bigResult), "--slow-body=500ms")
	if err != nil {
		return err
	}
	defer hostileFx.stop()

	// The manager sets its Go memory limit to 90% of its container's.
	debug.SetMemoryLimit(memoryLimit * 9 / 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, stop, err := startGateway(ctx, map[string]string{"tenant": victimFx.url, "attacker": hostileFx.url})
	if err != nil {
		return err
	}
	defer stop()
	victimURL, attackerURL := base+"/namespaces/tenant/mcp", base+"/namespaces/attacker/mcp"

	mem := &memPeak{}
	unloaded, err := victimAgent(victimURL, mem)
	if err != nil {
		return err
	}
	mem.reset()
	attacker, err := startAgents("attacker", attackerURL)
	if err != nil {
		return err
	}
	defer attacker.kill() // on an early return; a no-op once it has finished
	stopProfile, err := report.CPUProfile(*flagProfile)
	if err != nil {
		return err
	}
	histsBefore := readHists()
	loaded, err := victimAgent(victimURL, mem)
	stopProfile()
	hists := [2][]metrics.Sample{histsBefore, readHists()}
	if err != nil {
		return err
	}
	var att attackCounts
	if err := attacker.finish(&att); err != nil {
		return err
	}
	printTable(unloaded, loaded, att, mem, hists, loadBefore)
	return nil
}

// agentsProc is this program run as -role: the agents of one tenant in a
// process of their own, as they would run in a Pod of their own, so that
// the gateway's process holds only the gateway.
type agentsProc struct {
	role string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  strings.Builder
}

func startAgents(role, url string) (*agentsProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	nice := 0
	if role == "attacker" {
		nice = *flagNice
	}
	a := &agentsProc{role: role, cmd: niced(nice, self, "-role="+role, "-url="+url, "-duration="+flagDuration.String(),
		"-rate="+strconv.Itoa(*flagRate), "-sessions="+strconv.Itoa(*flagSessions),
		"-oversized="+strconv.Itoa(*flagUnread), "-flooders="+strconv.Itoa(*flagFlooders))}
	a.cmd.Stdout, a.cmd.Stderr = &a.out, os.Stderr
	if a.in, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	return a, a.cmd.Start()
}

// kill ends the agents if they are still running.
func (a *agentsProc) kill() {
	if a.cmd.ProcessState == nil {
		_ = a.cmd.Process.Kill()
		_ = a.cmd.Wait()
	}
}

// finish closes the agents' stdin, which ends an attacker, waits for them
// and decodes what they printed into v.
func (a *agentsProc) finish(v any) error {
	a.in.Close()
	if err := a.cmd.Wait(); err != nil {
		return fmt.Errorf("%s agents: %w", a.role, err)
	}
	return json.Unmarshal([]byte(a.out.String()), v)
}

// victimAgent runs the victim's agent for -duration in its own process and
// samples this process's memory meanwhile.
func victimAgent(url string, mem *memPeak) (victimRun, error) {
	var r victimRun
	a, err := startAgents("victim", url)
	if err != nil {
		return r, err
	}
	done := make(chan error, 1)
	go func() { done <- a.finish(&r) }()
	sample := time.NewTicker(100 * time.Millisecond)
	defer sample.Stop()
	for {
		select {
		case err := <-done:
			return r, err
		case <-sample.C:
			mem.sample()
		}
	}
}

// ---- processes and the gateway ----------------------------------------------

// niced runs bin at nice value n; set before exec, it holds for every
// thread the process starts.
func niced(n int, bin string, args ...string) *exec.Cmd {
	return exec.Command("nice", append([]string{"-n", strconv.Itoa(n), bin}, args...)...)
}

type fixtureProc struct {
	cmd *exec.Cmd
	url string
}

func startFixture(nice int, bin string, args ...string) (*fixtureProc, error) {
	cmd := niced(nice, bin, append([]string{"--http=127.0.0.1:0"}, args...)...)
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
	Lat      []time.Duration
	Failures int
	FirstErr string
}

// runVictim calls echo at -rate for d, one call at a time (a tick that
// finds the previous call still running is skipped).
func runVictim(url string, d time.Duration) victimRun {
	var r victimRun
	hc := &http.Client{Timeout: 30 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(*flagRate))
	defer tick.Stop()
	end := time.After(d)
	for i := 0; ; i++ {
		select {
		case <-end:
			return r
		case <-tick.C:
			start := time.Now()
			body, err := call(hc, url, i, "echo", `{"text":"still here"}`)
			switch {
			case err != nil:
				r.Failures++
				r.FirstErr = cmpOr(r.FirstErr, err.Error())
			case !strings.Contains(body, "still here") || strings.Contains(body, `"isError":true`):
				r.Failures++
				r.FirstErr = cmpOr(r.FirstErr, fmt.Sprintf("%.200s", body))
			default:
				r.Lat = append(r.Lat, time.Since(start))
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

// attackCounts is what the attacker's agents got, as runAttacker prints it.
type attackCounts struct {
	SessionsOK, Sessions429, Held, RefusedBytes, RefusedCalls, Calls, OtherErrors int64
	FirstToolError                                                                string
}

// runAttacker floods -url until its stdin closes, then prints what the
// attacker got.
func runAttacker() error {
	a := startAttack(*flagURL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	a.stop()
	c := attackCounts{SessionsOK: a.sessionsOK.Load(), Sessions429: a.sessions429.Load(), Held: a.held.Load(),
		RefusedBytes: a.refusedBytes.Load(), RefusedCalls: a.refusedCalls.Load(), Calls: a.calls.Load(),
		OtherErrors: a.otherErrors.Load()}
	if e := a.firstToolError.Load(); e != nil {
		c.FirstToolError = *e
	}
	return json.NewEncoder(os.Stdout).Encode(c)
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

func printTable(unloaded, loaded victimRun, a attackCounts, mem *memPeak, hists [2][]metrics.Sample, loadBefore string) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	p := func(r victimRun, q float64) time.Duration { return report.Percentile(r.Lat, q) }
	fmt.Printf("`go run ./hack/bench/isolation -duration=%s -rate=%d -sessions=%d -oversized=%d -flooders=%d -attacker-nice=%d`"+
		" (load average %s before, %s after)\n\n", *flagDuration, *flagRate, *flagSessions, *flagUnread, *flagFlooders, *flagNice,
		loadBefore, report.LoadAvg())
	fmt.Println("| Victim run | Calls | Failures | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		run  victimRun
	}{{"unloaded", unloaded}, {"under attack", loaded}} {
		fmt.Printf("| %s | %d | %d | %s | %s |\n", r.name, len(r.run.Lat), r.run.Failures, ms(p(r.run, 50)), ms(p(r.run, 99)))
	}
	fmt.Println()
	fmt.Printf("Attacker: %d sessions opened, %d initialize refused with 429; %d answers of 12 MiB received, %d calls refused "+
		"by the result-byte budget, %d by the in-flight budgets, %d answered, %d other errors.\n\n",
		a.SessionsOK, a.Sessions429, a.Held, a.RefusedBytes, a.RefusedCalls, a.Calls, a.OtherErrors)
	fmt.Println("| Gateway's process under attack | Count | p99 | max |")
	fmt.Println("|---|--:|--:|--:|")
	for i, h := range runtimeHists {
		n, b := histDelta(hists[0][i], hists[1][i], 0.99, 1)
		fmt.Printf("| %s (bucket bounds) | %d | ≤ %.2f ms | ≤ %.2f ms |\n", h.what, n, b[0]*1e3, b[1]*1e3)
	}
	fmt.Println()
	fmt.Println("| Goal (docs/design.md, Budgets) | Measured | Met |")
	fmt.Println("|---|---|---|")
	ratio := float64(p(loaded, 99)) / float64(max(p(unloaded, 99), 1))
	fmt.Printf("| victim p99 under attack ≤ 2× unloaded | %.2f× | %s |\n", ratio, report.YesNo(ratio <= 2))
	fmt.Printf("| victim failures under attack = 0 | %d | %s |\n", loaded.Failures, report.YesNo(loaded.Failures == 0))
	fmt.Printf("| peak RSS of the gateway's process under the manager's %d MiB limit | %d MiB (heap objects %d MiB) | %s |\n",
		memoryLimit>>20, mem.rss>>20, mem.heap>>20, report.YesNo(mem.rss < memoryLimit))
	if a.FirstToolError != "" {
		fmt.Printf("\nFirst tool error the attacker got: %.300s\n", a.FirstToolError)
	}
	if loaded.FirstErr != "" {
		fmt.Printf("\nFirst victim failure under attack: %s\n", loaded.FirstErr)
	}
}

// runtimeHists are the Go runtime's histograms of the gateway's process
// that show how long its goroutines waited: to run once runnable, and for
// the garbage collector's stop-the-world pauses.
var runtimeHists = []struct{ name, what string }{
	{"/sched/latencies:seconds", "runnable goroutine waits to run"},
	{"/sched/pauses/total/gc:seconds", "GC stop-the-world pauses"},
}

func readHists() []metrics.Sample {
	s := make([]metrics.Sample, len(runtimeHists))
	for i, h := range runtimeHists {
		s[i].Name = h.name
	}
	metrics.Read(s)
	return s
}

// histDelta is what a histogram counted between two reads: how many, and
// the upper bounds of the buckets of the quantiles qs.
func histDelta(before, after metrics.Sample, qs ...float64) (uint64, []float64) {
	a, b := after.Value.Float64Histogram(), before.Value.Float64Histogram()
	counts := make([]uint64, len(a.Counts))
	var total uint64
	for i := range a.Counts {
		counts[i] = a.Counts[i] - b.Counts[i]
		total += counts[i]
	}
	bounds := make([]float64, len(qs))
	for k, q := range qs {
		var acc uint64
		for i, c := range counts {
			acc += c
			if acc > 0 && float64(acc) >= q*float64(total) {
				bounds[k] = a.Buckets[i+1]
				break
			}
		}
	}
	return total, bounds
}
