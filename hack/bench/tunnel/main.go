// Command tunnel measures what the shim's stdio tunnel (internal/shim)
// adds to a stdio MCP server: tools/call of the fixture's echo tool over
// the child's pipes directly, as the Local runtime talks to it, against the
// same call through the shim on loopback, as the Pod runtime talks to it
// (docs/design.md, "The shim and the tunnel": a tools/call through it should
// add at most 0.3 ms at p50). It also
// times opening a session both ways (spawn or tunnel, connect, tools/list).
//
//	go run ./hack/bench/tunnel [-calls=2000] [-rounds=5] [-connects=30]
//
// The shim and the fixture run as separate processes, built into a
// temporary directory unless -shim and -fixture name binaries. It is a
// benchmark, not a test: it asserts nothing and exits 0 whether or not the
// goal is met (exit 1 only when it cannot measure at all).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

const (
	fixturePkg = "./test/fixture/cmd/mcp-fixture"
	shimPkg    = "./cmd/shim"
	token      = "bench-token-0123456789abcdef"
	goal       = 300 * time.Microsecond
)

var (
	flagCalls    = flag.Int("calls", 2000, "sequential echo calls per round and path")
	flagRounds   = flag.Int("rounds", 5, "direct and tunnel alternate in this many rounds, so that load changes hit both")
	flagWarmup   = flag.Int("warmup", 300, "echo calls per path before measuring (not recorded)")
	flagConnects = flag.Int("connects", 30, "sessions opened per path: spawn or tunnel + connect + tools/list + close")
	flagFixture  = flag.String("fixture", "", "fixture binary (default: go build "+fixturePkg+" into a temp dir)")
	flagShim     = flag.String("shim", "", "shim binary (default: CGO_ENABLED=0 go build "+shimPkg+" into a temp dir)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	fixture, shimBin string
	addr             string // the shim's listen address
	cert             []byte // the shim's certificate (PEM), pinned
}

func run() error {
	started, loadBefore := time.Now(), report.LoadAvg()
	dir, err := os.MkdirTemp("", "bench-tunnel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{fixture: *flagFixture, shimBin: *flagShim}
	if b.fixture == "" {
		if b.fixture, err = build(dir, "mcp-fixture", fixturePkg); err != nil {
			return err
		}
	}
	if b.shimBin == "" {
		if b.shimBin, err = build(dir, "shim", shimPkg); err != nil {
			return err
		}
	}
	stop, err := b.startShim(dir)
	if err != nil {
		return err
	}
	defer stop()

	ctx := context.Background()
	direct, err := b.connectDirect(ctx)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	defer direct.close()
	tunneled, err := b.connectTunnel(ctx)
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	defer tunneled.close()

	for _, s := range []*session{direct, tunneled} {
		if _, err := s.echoes(ctx, *flagWarmup); err != nil {
			return err
		}
	}
	var directCalls, tunnelCalls []time.Duration
	for range *flagRounds {
		d, err := direct.echoes(ctx, *flagCalls)
		if err != nil {
			return err
		}
		tn, err := tunneled.echoes(ctx, *flagCalls)
		if err != nil {
			return err
		}
		directCalls, tunnelCalls = append(directCalls, d...), append(tunnelCalls, tn...)
	}
	direct.close()
	tunneled.close()

	var directOpen, tunnelOpen []time.Duration
	for range *flagConnects {
		d, err := timeOpen(ctx, b.connectDirect)
		if err != nil {
			return fmt.Errorf("direct open: %w", err)
		}
		tn, err := timeOpen(ctx, b.connectTunnel)
		if err != nil {
			return fmt.Errorf("tunnel open: %w", err)
		}
		directOpen, tunnelOpen = append(directOpen, d), append(tunnelOpen, tn)
	}
	b.print(started, loadBefore, directCalls, tunnelCalls, directOpen, tunnelOpen)
	return nil
}

func build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s (run from the repository root): %w", pkg, err)
	}
	return out, nil
}

var listeningRE = regexp.MustCompile(`msg=listening .*addr=(\S+)`)

// startShim runs the shim with the fixture as its command on a free
// loopback port, and returns how to stop it.
func (b *bench) startShim(dir string) (func(), error) {
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	cert, key, err := tunnel.NewKeyPair("bench")
	if err != nil {
		return nil, err
	}
	b.cert = cert
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(b.shimBin, "--listen=127.0.0.1:0", "--token-file="+tokenFile,
		"--tls-cert-file="+certFile, "--tls-key-file="+keyFile, "--", b.fixture)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
			b.addr = m[1]
			break
		}
	}
	if b.addr == "" {
		stop()
		return nil, errors.New("the shim did not say where it listens")
	}
	go func() { // keep its stderr flowing; the fixture writes none
		for sc.Scan() {
		}
	}()
	return stop, nil
}

// session is one MCP client session and what ends it.
type session struct {
	cs   *mcp.ClientSession
	done func() // waits until the server process is gone
}

func (s *session) close() {
	if s.cs != nil {
		_ = s.cs.Close()
		s.done()
		s.cs = nil
	}
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
}

// connectDirect spawns the fixture as a child with stdio pipes.
func (b *bench) connectDirect(ctx context.Context) (*session, error) {
	cmd := exec.Command(b.fixture)
	proc.OwnGroup(cmd, 0)
	cs, err := newClient().Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, err
	}
	// CommandTransport's Close waits for the child.
	return &session{cs: cs, done: func() {}}, nil
}

// connectTunnel opens a tunnel through the shim.
func (b *bench) connectTunnel(ctx context.Context) (*session, error) {
	tun, err := tunnel.Dial(ctx, b.addr, tunnel.Credentials{Token: token, Cert: b.cert})
	if err != nil {
		return nil, err
	}
	cs, err := newClient().Connect(ctx, &mcp.IOTransport{Reader: tun.Stdout(), Writer: tun.Stdin()}, nil)
	if err != nil {
		tun.Close()
		<-tun.Done()
		return nil, err
	}
	return &session{cs: cs, done: func() { <-tun.Done() }}, nil
}

// echoes makes n sequential echo calls and returns their latencies.
func (s *session) echoes(ctx context.Context, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	for range n {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t := time.Now()
		res, err := s.cs.CallTool(cctx, params)
		out = append(out, time.Since(t))
		cancel()
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return nil, errors.New("echo answered isError")
		}
	}
	return out, nil
}

// timeOpen times open + connect + complete tools/list, then closes the
// session and waits until the server process is gone (not timed).
func timeOpen(ctx context.Context, open func(context.Context) (*session, error)) (time.Duration, error) {
	t := time.Now()
	s, err := open(ctx)
	if err != nil {
		return 0, err
	}
	defer s.close()
	for _, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return 0, err
		}
	}
	return time.Since(t), nil
}

func (b *bench) print(started time.Time, loadBefore string, dc, tc, do, to []time.Duration) {
	cmd := "go run ./hack/bench/tunnel " + strings.Join(os.Args[1:], " ")
	fmt.Printf("Command: `%s`  \n", strings.TrimSpace(cmd))
	fmt.Printf("Date: %s; %d cores (runtime.NumCPU); %s %s/%s; fixture as a stdio child, direct and behind the shim on 127.0.0.1; run took %s; 1-min load average %s before, %s after.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		time.Since(started).Round(time.Second), loadBefore, report.LoadAvg())
	fmt.Println("| Measurement | n | p50 | p90 | p99 | min | max |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|")
	row := func(name string, xs []time.Duration) {
		p := func(q float64) string { return fmtDur(report.Percentile(xs, q)) }
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s |\n", name, len(xs), p(50), p(90), p(99), p(0), p(100))
	}
	row("tools/call echo, direct (Local: stdio pipes)", dc)
	row("tools/call echo, through the shim's tunnel", tc)
	row("open: spawn + connect + tools/list, direct", do)
	row("open: tunnel + spawn + connect + tools/list", to)
	fmt.Println()
	added := report.Percentile(tc, 50) - report.Percentile(dc, 50)
	fmt.Printf("| Goal | Measured | Met |\n|---|--:|---|\n")
	fmt.Printf("| a tools/call through the tunnel adds ≤ %s at p50 | %s | %s |\n", fmtDur(goal), fmtDur(added),
		report.YesNo(added <= goal))
	fmt.Printf("\nAdded p99: %s. Percentiles are nearest-rank; calls are sequential, one session per path, %d rounds alternating direct and tunnel.\n",
		fmtDur(report.Percentile(tc, 99)-report.Percentile(dc, 99)), *flagRounds)
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}
