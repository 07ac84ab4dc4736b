package shim

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/shim/tunnel"
	"github.com/mcpbridge/operator/internal/testenv"
)

// What the shim's stdio tunnel (the Pod runtime's path) adds over a stdio
// child's own pipes (the Local runtime's path), on loopback, with the shim
// binary running the fixture as its command (docs/benchmarks.md, "The
// tunnel on loopback"):
//
//	go test -run '^$' -bench Tunnel -benchtime=10000x ./internal/shim/
//
// Benchmarks, not tests: a missed target is logged, never a failure.

// tunnelTarget is what a tools/call through the tunnel may add at p50
// (docs/design.md, "How it is tested").
const tunnelTarget = 300 * time.Microsecond

// tunnelWarmup calls per path are made before measuring.
const tunnelWarmup = 300

// BenchmarkTunnelCall: sequential tools/call of the fixture's echo over one
// go-sdk session per path, direct (mcp.CommandTransport on the fixture) and
// through the shim (Dial + mcp.IOTransport); each iteration calls once on
// each path, so that a change of load hits both alike.
func BenchmarkTunnelCall(b *testing.B) {
	sh := startShim(b, shortGrace, fixtureBin)
	ctx := context.Background()
	direct := tunnelBenchDirect(b, ctx)
	defer direct.close()
	tunneled := tunnelBenchTunnel(b, ctx, sh.addr)
	defer tunneled.close()
	for range tunnelWarmup {
		direct.echo(b, ctx)
		tunneled.echo(b, ctx)
	}
	var d, tn testenv.Latencies
	for b.Loop() {
		d = append(d, direct.echo(b, ctx))
		tn = append(tn, tunneled.echo(b, ctx))
	}
	d.Report(b, "direct", "us")
	tn.Report(b, "tunnel", "us")
	added := tn.Percentile(50) - d.Percentile(50)
	b.ReportMetric(float64(added)/float64(time.Microsecond), "added-p50-us")
	b.ReportMetric(float64(tn.Percentile(99)-d.Percentile(99))/float64(time.Microsecond), "added-p99-us")
	testenv.Target(b, "added by the tunnel at p50", added, "≤ "+tunnelTarget.String(), added <= tunnelTarget)
	b.Logf("load average %s", testenv.LoadAvg())
}

// BenchmarkTunnelOpen: opening a session per path, the server process
// included (spawn, or tunnel and spawn by the shim; connect; the complete
// tools/list); closing it and waiting for the process to go is not timed.
func BenchmarkTunnelOpen(b *testing.B) {
	sh := startShim(b, shortGrace, fixtureBin)
	ctx := context.Background()
	var d, tn testenv.Latencies
	for b.Loop() {
		d = append(d, tunnelBenchOpen(b, ctx, func() *benchSession { return tunnelBenchDirect(b, ctx) }))
		tn = append(tn, tunnelBenchOpen(b, ctx, func() *benchSession { return tunnelBenchTunnel(b, ctx, sh.addr) }))
	}
	d.Report(b, "direct", "ms")
	tn.Report(b, "tunnel", "ms")
	b.Logf("load average %s (no target: the local cold start is part of the Pod runtime's recovery target)", testenv.LoadAvg())
}

// benchSession is one MCP client session and what ends it.
type benchSession struct {
	cs   *mcp.ClientSession
	done func() // waits until the server process is gone
}

func (s *benchSession) close() {
	_ = s.cs.Close()
	s.done()
}

func benchClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
}

// tunnelBenchDirect spawns the fixture as a child with stdio pipes; the
// transport's Close waits for it.
func tunnelBenchDirect(b *testing.B, ctx context.Context) *benchSession {
	b.Helper()
	cmd := exec.Command(fixtureBin)
	proc.OwnGroup(cmd, 0)
	cs, err := benchClient().Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatalf("direct: %v", err)
	}
	return &benchSession{cs: cs, done: func() {}}
}

// tunnelBenchTunnel opens a tunnel through the shim at addr.
func tunnelBenchTunnel(b *testing.B, ctx context.Context, addr string) *benchSession {
	b.Helper()
	tun, err := tunnel.Dial(ctx, addr, creds(testToken))
	if err != nil {
		b.Fatalf("dial: %v", err)
	}
	cs, err := benchClient().Connect(ctx, &mcp.IOTransport{Reader: tun.Stdout(), Writer: tun.Stdin()}, nil)
	if err != nil {
		tun.Close()
		<-tun.Done()
		b.Fatalf("connect over the tunnel: %v", err)
	}
	return &benchSession{cs: cs, done: func() { <-tun.Done() }}
}

// echo makes one echo call and returns its latency.
func (s *benchSession) echo(b *testing.B, ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t := time.Now()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	d := time.Since(t)
	if err != nil || res.IsError {
		b.Fatalf("echo: %v (tool error %v)", err, res != nil && res.IsError)
	}
	return d
}

// tunnelBenchOpen times open, connect and the complete tools/list.
func tunnelBenchOpen(b *testing.B, ctx context.Context, open func() *benchSession) time.Duration {
	b.Helper()
	t := time.Now()
	s := open()
	defer s.close()
	for _, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			b.Fatalf("tools/list: %v", err)
		}
	}
	return time.Since(t)
}
