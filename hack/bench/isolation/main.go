// Command isolation measures whether one tenant can take the gateway from
// another (docs/design.md, "Budgets"): a victim's agent calls its tenant's echo
// tool at a steady rate, first alone and then while an attacker in another
// namespace floods the gateway with every attack at once for the same time,
// and it prints a markdown table with the command that reproduces it: the
// victim's p50/p99 and failures in both runs, what the attacker got, the
// gateway's scheduling latency and GC pauses under attack, and its peak
// heap and RSS (goal: victim p99 ≤ 2× unloaded, 0 failures, RSS under the
// manager's 512 MiB limit).
//
//	go run ./hack/bench/isolation [-duration=20s] [-rate=50] [-sessions=1] [-oversized=64] [-flooders=16]
//		[-tokens=true] [-token-flooders=16] [-probers=4] [-phantoms=5000] [-storm-tools=1000]
//		[-heavy=0] [-tls] [-handshakers=0] [-attacker-nice=19] [-control] [-cpuprofile=FILE] [-memprofile=FILE] [-trace=FILE]
//
// The fixtures run as separate processes (--http=127.0.0.1:0): the victim's
// plain one, the attacker's hostile one (--big-result --slow-body, a 12 MiB
// answer that arrives 1 MiB every 500 ms) and its storming one (-storm-tools
// tools, its list changed every 15 ms, each change announced; the storm is
// held while the victim runs alone, after its server is connected, so that
// it is part of the attack only). With -tokens (the default) a
// control plane (bin/k8s, as for make test) answers the gateway's
// TokenReviews and SubjectAccessReviews with the manager's default caches
// and limits. The gateway (the default budgets, the Go memory limit the
// manager sets in its 512 MiB container and its GC tuning, unless GOGC is
// set) and the supervisors run in this
// process, so the heap, RSS and runtime histograms are the gateway's; the
// victim's agent and the attacker's agents run in processes of their own
// (this program with -role), as agents run in Pods of their own. They share
// this machine's cores with the gateway, which a cluster's agents would
// not: the attacker's agents, its upstreams and the control plane run at
// -attacker-nice, and at 19 they take only the CPU the gateway and the
// victim leave idle.
//
// The attacks, all at once: -sessions loops of initialize; -oversized
// agents that call the slow 12 MiB tool without pause; -flooders agents
// that call the hostile server's sleep tool (1 s) without pause; the
// storm's re-syncs; with -tokens, -token-flooders agents that send a new
// forged token (a well-formed JWT for the gateway's audience, so that only
// a TokenReview can refuse it) on every request, each from a loopback
// address of its own, and -probers agents of an identity that may use none
// of the -phantoms McpServers of the attacker's namespace, listing tools
// without pause (per-server authorization fan-out); and -heavy agents
// listing tools without pause with 4 MiB in _meta: small objects, which
// the SDK's path would decode into tens of times that, or (every second
// pair) one string, which it decodes several times; every second agent on
// a new connection for each request (none by default, so that runs
// compare with the ones before the flag).
// With -tls the gateway serves HTTPS with a certificate of the run's own
// CA, and -handshakers agents list tools on a new connection each time
// (none by default).
// With -control, the victim runs a third time while the attacker's
// oversized agents call its hostile upstream directly, and nothing else
// runs: the attack's largest traffic, without the gateway. On a machine
// where that alone slows the victim, the ratio under attack is partly the
// machine's (docs/benchmarks.md, "Isolation").
// It is a benchmark, not a test: it asserts nothing and exits 0 whether or
// not a goal is met (exit 1 only when it cannot measure at all).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/gctune"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

var (
	flagDuration   = flag.Duration("duration", 20*time.Second, "length of each run (unloaded, then under attack)")
	flagRate       = flag.Int("rate", 50, "victim calls per second")
	flagSessions   = flag.Int("sessions", 1, "attacker loops of initialize")
	flagUnread     = flag.Int("oversized", 64, "attacker agents that call the slow 12 MiB tool without pause")
	flagFlooders   = flag.Int("flooders", 16, "attacker agents that call a 1 s tool without pause")
	flagFixture    = flag.String("fixture", "", "path of a prebuilt mcp-fixture (default: go build into a temp dir)")
	flagRole       = flag.String("role", "", "internal: run as the victim's or the attacker's agents (victim|attacker) against -url and print what they saw as JSON")
	flagURL        = flag.String("url", "", "internal: the gateway endpoint of -role")
	flagNice       = flag.Int("attacker-nice", 19, "the nice value of the attacker's agents and of its upstream: at 19 they take the CPU the gateway and the victim leave idle, as the attacker's Pods would not take the gateway's cores")
	flagProfile    = flag.String("cpuprofile", "", "write a CPU profile of the gateway's process during the attack to `FILE`")
	flagMemProfile = flag.String("memprofile", "", "write an allocation profile of the gateway's process, from its start to the attack's end, to `FILE` (go tool pprof -sample_index=alloc_space)")
	flagTrace      = flag.String("trace", "", "write an execution trace of the gateway's process during the attack to `FILE` (go tool trace)")
	flagTokens     = flag.Bool("tokens", true, "authenticate agents with ServiceAccount tokens (a control plane answers the reviews) and add the token attacks: "+
		"-token-flooders, -probers and -phantoms")
	flagForgers = flag.Int("token-flooders", 16, "attacker agents that send a new forged token on every request, each from an address of its own (127.0.0.2, ...)")
	flagHeavy   = flag.Int("heavy", 0, "attacker agents that list tools without pause, each request carrying a 4 MiB _meta member: small objects that the gateway reads and checks (agents 0, 1, 4, 5, ...) or one string, a list the SDK decodes and answers (2, 3, 6, 7, ...); every second one opens a new connection for each request")
	flagProbers = flag.Int("probers", 4, "attacker agents, of an identity that may use none of its namespace's McpServers, that list tools without pause: "+
		"each list a per-server authorization fan-out over -phantoms")
	flagPhantoms = flag.Int("phantoms", 5000, "McpServers of the attacker's namespace that its agents may not use")
	flagStorm    = flag.Int("storm-tools", 1000, "tools of the attacker's storming upstream, whose list changes every 15 ms, each change announced with list_changed (0: no storm)")
	flagControl  = flag.Bool("control", false, "run the victim a third time, while the attacker's -oversized agents call its hostile upstream directly, not through the gateway, "+
		"as many at once as the gateway's budget of calls in flight per identity lets through: what the attack's largest traffic costs this machine's other processes, the victim's among them, without the gateway")
	flagTLS         = flag.Bool("tls", false, "serve the gateway over TLS, as the manager does by default, with a CA the bench makes for the run")
	flagHandshakers = flag.Int("handshakers", 0, "attacker agents that list tools without pause on a new connection for each request: with -tls, a TLS handshake each")
	flagCA          = flag.String("ca", "", "internal: the PEM file of the CA the agents of -role trust (-tls)")
	flagDirect      = flag.Bool("direct", false, "internal: the attacker's -oversized agents call the upstream at -url by its own tool names, and no other attack runs (-control)")
)

// agentCA is the CA's certificate file the agents' processes trust, with
// -tls.
var agentCA string

// The tenants and their servers.
const (
	victimNS, attackerNS        = "tenant", "attacker"
	victimServer, hostileServer = "tools", "tools"
	stormServer                 = "storm"
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
	var auth *authEnv
	if *flagTokens {
		var err error
		if auth, err = startAuth(*flagNice); err != nil {
			return fmt.Errorf("control plane (-tokens=false runs without): %w", err)
		}
		defer auth.stop()
	}
	upstreams, storm, stopFixtures, err := startFixtures(bin)
	defer stopFixtures()
	if err != nil {
		return err
	}

	// The manager sets its Go memory limit to 90% of its container's, and
	// tunes its GC by what it allocates.
	debug.SetMemoryLimit(memoryLimit * 9 / 10)
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	defer cancel()
	if gc := gctune.New(gctune.Flags{QuietHeadroom: gctune.DefaultQuietHeadroom, BusyPercent: gctune.DefaultBusyPercent}); gc != nil {
		go func() { _ = gc.Start(ctx) }()
	}
	var tlsConfig *tls.Config
	if *flagTLS {
		dir, err := os.MkdirTemp("", "isolation-tls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if tlsConfig, agentCA, err = gatewayTLS(dir); err != nil {
			return err
		}
	}
	base, stop, err := startGateway(ctx, upstreams, auth, tlsConfig)
	if err != nil {
		return err
	}
	defer stop()
	// The storm is part of the attack: its upstream is held still while the
	// victim runs alone, its server connected and listed (docs/benchmarks.md,
	// "Isolation").
	storm.holdStorm()
	victimURL, attackerURL := base+"/namespaces/"+victimNS+"/mcp", base+"/namespaces/"+attackerNS+"/mcp"

	mem := &memPeak{}
	calmBefore := attackerChanges.Load()
	unloaded, err := victimAgent(victimURL, auth.token(victimNS), mem)
	if err != nil {
		return err
	}
	calm := attackerChanges.Load() - calmBefore
	mem.reset()
	storm.letStormGo()
	attacker, err := startAgents("attacker", attackerURL, auth.token(attackerNS), auth.token(prober))
	if err != nil {
		return err
	}
	defer attacker.kill() // on an early return; a no-op once it has finished
	stopProfile, err := report.CPUProfile(*flagProfile)
	if err != nil {
		return err
	}
	stopTrace, err := report.Trace(*flagTrace)
	if err != nil {
		return err
	}
	histsBefore, changesBefore := readHists(), attackerChanges.Load()
	loaded, err := victimAgent(victimURL, auth.token(victimNS), mem)
	stopProfile()
	stopTrace()
	if *flagMemProfile != "" {
		if err := report.WriteProfile("allocs", *flagMemProfile); err != nil {
			return err
		}
	}
	hists := [2][]metrics.Sample{histsBefore, readHists()}
	changes := attackerChanges.Load() - changesBefore
	if err != nil {
		return err
	}
	var att attackCounts
	if err := attacker.finish(&att); err != nil {
		return err
	}
	var control *controlRun
	if *flagControl {
		if control, err = runControl(upstreams, victimURL, auth.token(victimNS), mem); err != nil {
			return err
		}
	}
	printTable(unloaded, loaded, att, [2]int64{calm, changes}, mem, hists, loadBefore)
	printControl(unloaded, loaded, control)
	return nil
}

// controlRun is the victim's third run (-control) and what the attacker's
// agents got meanwhile.
type controlRun struct {
	victim   victimRun
	agents   int
	received int64
	errors   int64
}

// runControl runs the victim while the attacker's oversized agents, as many
// as the gateway lets call at once, call the hostile upstream directly: the
// upstream marshals and sends, and the agents receive, 12 MiB answers as
// under attack, and the gateway has none of it to do.
func runControl(upstreams []upstream, victimURL, token string, mem *memPeak) (*controlRun, error) {
	i := slices.IndexFunc(upstreams, func(u upstream) bool { return u.ns == attackerNS && u.name == hostileServer })
	n := min(*flagUnread, gateway.DefaultMaxCallsPerIdentity)
	attacker, err := startAgents("attacker", upstreams[i].url, "", "", "-direct=true", "-oversized="+strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	defer attacker.kill()
	c := &controlRun{agents: n}
	if c.victim, err = victimAgent(victimURL, token, mem); err != nil {
		return nil, err
	}
	var att attackCounts
	if err := attacker.finish(&att); err != nil {
		return nil, err
	}
	c.received, c.errors = att.Held, att.OtherErrors+att.RefusedCalls+att.RefusedBytes+att.Calls
	return c, nil
}

// upstream is one supervised server.
type upstream struct{ ns, name, url string }

type fixtureSpec struct {
	up   upstream
	nice int
	args []string
}

// startFixtures starts the victim's plain upstream, the attacker's hostile
// one and, with -storm-tools, its storming one (storm, nil without); stop
// ends those started.
func startFixtures(bin string) (ups []upstream, storm *fixtureProc, stop func(), err error) {
	var started []*fixtureProc
	stop = func() {
		for _, fx := range started {
			fx.stop()
		}
	}
	specs := []fixtureSpec{
		{upstream{ns: victimNS, name: victimServer}, 0, []string{"--stateless"}},
		{upstream{ns: attackerNS, name: hostileServer}, *flagNice,
			[]string{"--stateless", "--big-result=" + strconv.Itoa(bigResult), "--slow-body=500ms"}},
	}
	if *flagStorm > 0 {
		// Sessions, so that the supervisor's stream hears every change.
		specs = append(specs, fixtureSpec{upstream{ns: attackerNS, name: stormServer}, *flagNice,
			[]string{"--tools=" + strconv.Itoa(*flagStorm), "--schema-bytes=256", "--list-changed-every=" + fixture.MinListChangedEvery.String()}})
	}
	for _, sp := range specs {
		fx, err := startFixture(sp.nice, bin, sp.args...)
		if err != nil {
			return nil, nil, stop, err
		}
		started = append(started, fx)
		sp.up.url = fx.url
		ups = append(ups, sp.up)
		if sp.up.name == stormServer {
			storm = fx
		}
	}
	return ups, storm, stop, nil
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

func startAgents(role, url, token, proberToken string, extra ...string) (*agentsProc, error) {
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
		"-oversized="+strconv.Itoa(*flagUnread), "-flooders="+strconv.Itoa(*flagFlooders),
		"-tokens="+strconv.FormatBool(*flagTokens), "-token-flooders="+strconv.Itoa(*flagForgers), "-probers="+strconv.Itoa(*flagProbers), "-heavy="+strconv.Itoa(*flagHeavy),
		"-handshakers="+strconv.Itoa(*flagHandshakers), "-ca="+agentCA)}
	a.cmd.Args = append(a.cmd.Args, extra...)
	a.cmd.Env = append(os.Environ(), tokenEnv+"="+token)
	if role == "attacker" {
		a.cmd.Env = append(a.cmd.Env, proberTokenEnv+"="+proberToken)
	}
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
func victimAgent(url, token string, mem *memPeak) (victimRun, error) {
	var r victimRun
	a, err := startAgents("victim", url, token, "")
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

// holdStorm holds the storm of fx (a fixture run with
// --list-changed-every), which goes on answering, and letStormGo lets it go
// on. Stopping the process instead (SIGSTOP) stalled the re-sync its last
// change asked for, and its server reconnected or failed during the
// attack. Both do nothing on a nil fx.
func (fx *fixtureProc) holdStorm() { fx.signal(syscall.SIGUSR1) }

func (fx *fixtureProc) letStormGo() { fx.signal(syscall.SIGUSR2) }

func (fx *fixtureProc) signal(sig syscall.Signal) {
	if fx != nil {
		_ = fx.cmd.Process.Signal(sig)
	}
}

func (fx *fixtureProc) stop() {
	_ = fx.cmd.Process.Signal(syscall.SIGTERM)
	_ = fx.cmd.Wait()
}

// startGateway supervises one server per namespace ("tools" in each) and
// serves the gateway with the default budgets on a loopback port; it
// returns once every server is Ready.
func startGateway(ctx context.Context, upstreams []upstream, auth *authEnv, tlsConfig *tls.Config) (string, func(), error) {
	reg, shares := registry.New(), bridge.NewShares() // as the manager's supervisors share them
	var sups []*bridge.Supervisor
	for _, up := range upstreams {
		p := &policy.Policy{ServerName: up.name, Transport: v1alpha1.TransportStreamableHTTP, HTTP: &policy.HTTP{URL: up.url},
			ToolCallTimeout: 30 * time.Second, ConnectionTimeout: 10 * time.Second,
			Reconnect: policy.Reconnect{Enabled: true, InitialDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxAttempts: 10}}
		sup := bridge.New(bridge.Options{Namespace: up.ns, Name: up.name, Policy: p, Registry: reg, Log: logr.Discard(), Shares: shares,
			Egress: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})})
		sup.Start(ctx)
		sups = append(sups, sup)
		if up.name == stormServer {
			stormSupervisor = sup
		}
	}
	go countChanges(ctx, reg.Subscribe(), attackerNS, &attackerChanges)
	g := &gateway.Gateway{Registry: reg, Log: logr.Discard(), TLS: tlsConfig}
	if auth != nil {
		g.Auth = auth.access()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv, ln := g.Server(ln) // as the manager serves it: refused callers' connections paced
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
	if tlsConfig != nil {
		return "https://" + ln.Addr().String(), stop, nil
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// stormSupervisor supervises the storming upstream (-storm-tools), for the
// report of its state once the attack ends.
var stormSupervisor *bridge.Supervisor

// attackerChanges counts the changes of the attacker's published tools:
// with -storm-tools, the storm's re-syncs that reached the registry.
var attackerChanges atomic.Int64

// countChanges counts in n the changes of ns that sub reports, until ctx
// ends.
func countChanges(ctx context.Context, sub *registry.Subscription, ns string, n *atomic.Int64) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.C:
			if slices.Contains(sub.Drain(), ns) {
				n.Add(1)
			}
		}
	}
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
	hc := &http.Client{Transport: agentTransport(), Timeout: 30 * time.Second}
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

// toolPrefix is what the gateway puts before the tools' names of the
// servers named "tools"; "" in the attacker's agents of -direct, which call
// the upstream itself.
var toolPrefix = "mcp__tools__"

func callBody(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s%s","arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"}}}}`, id, toolPrefix, tool, args, registry.SessionlessProtocol)
}

func callHeaders(tool string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": registry.SessionlessProtocol, "Mcp-Method": "tools/call",
		"Mcp-Name": toolPrefix + tool}
}

func post(hc *http.Client, url, body string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token := os.Getenv(tokenEnv); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return hc.Do(req)
}
