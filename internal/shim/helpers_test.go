package shim

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

const (
	eventually = 20 * time.Second
	testToken  = "0123456789abcdef-test-token"
	// shortGrace keeps escalation tests quick; barrier is the close
	// barrier they hold the shim to.
	shortGrace = 100 * time.Millisecond
	barrier    = time.Second
)

// The test key pair, issued once for the whole package as the manager
// issues one per server.
var testCertPEM, testKeyPEM = func() ([]byte, []byte) {
	c, k, err := tunnel.NewKeyPair("shim test")
	if err != nil {
		panic(err)
	}
	return c, k
}()

// creds are the test credentials with token tok.
func creds(tok string) tunnel.Credentials { return tunnel.Credentials{Token: tok, Cert: testCertPEM} }

// testCertificate is the test key pair as the shim serves it.
func testCertificate() *tls.Certificate {
	c, err := tls.X509KeyPair(testCertPEM, testKeyPEM)
	if err != nil {
		panic(err)
	}
	return &c
}

// writeKeyPair writes the test key pair into dir, as the Secret is mounted.
func writeKeyPair(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, testCertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, testKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// probeTransport reaches the shim's probes as the kubelet does: TLS
// without verification.
func probeTransport() *http.Transport {
	return &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // as the kubelet's HTTPS probes
}

// syncBuffer collects a process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shimProc is the shim running as a real process, as in a container.
type shimProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{}
	err    error // set before exited is closed
}

var listeningRE = regexp.MustCompile(`msg=listening .*addr=(\S+)`)

// startShim runs the shim binary with the test token on a free loopback
// port; it is stopped (SIGTERM) when the test ends.
func startShim(t testing.TB, grace time.Duration, command ...string) *shimProc {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeKeyPair(t, dir)
	args := append([]string{"--listen=127.0.0.1:0", "--token-file=" + tokenFile,
		"--tls-cert-file=" + certFile, "--tls-key-file=" + keyFile,
		"--terminate-grace=" + grace.String(), "--"}, command...)
	p := &shimProc{cmd: exec.Command(shimBin, args...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	// A descendant left behind by a failing test may hold stderr open:
	// Wait returns anyway once the shim has exited.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	g := NewWithT(t)
	g.Eventually(func() string {
		if m := listeningRE.FindStringSubmatch(p.stderr.String()); m != nil {
			p.addr = m[1]
		}
		return p.addr
	}).WithTimeout(eventually).WithPolling(5*time.Millisecond).ShouldNot(BeEmpty(), "shim stderr: %s", p.stderr)
	return p
}

// stop SIGTERMs the shim and waits for it; a shim that does not stop
// fails the test.
func (p *shimProc) stop(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(eventually):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("the shim did not stop on SIGTERM; stderr:\n%s", p.stderr)
	}
}

func (p *shimProc) pid() int { return p.cmd.Process.Pid }

// dialOK opens a tunnel that must open; it is aborted when the test ends.
func dialOK(t *testing.T, addr string) *tunnel.Tunnel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	tun, err := tunnel.Dial(ctx, addr, creds(testToken))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		tun.Close()
		<-tun.Done()
	})
	return tun
}

// connect runs an MCP client session over the tunnel.
func connect(t *testing.T, tun *tunnel.Tunnel) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "shim-test", Version: "v0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}).
		Connect(ctx, &mcp.IOTransport{Reader: tun.Stdout(), Writer: tun.Stdin()}, nil)
	if err != nil {
		t.Fatalf("connect over the tunnel: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callText calls a tool and returns its text content.
func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// fixturePID asks the fixture for its pid.
func fixturePID(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	pid, err := strconv.Atoi(callText(t, cs, "pid", nil))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitDone waits for the tunnel's end and returns its error.
func waitDone(t *testing.T, tun *tunnel.Tunnel, within time.Duration) error {
	t.Helper()
	select {
	case <-tun.Done():
		return tun.Err()
	case <-time.After(within):
		t.Fatalf("the tunnel did not end within %v", within)
		return nil
	}
}

// exitError asserts a confirmed end and returns it.
func exitError(t *testing.T, err error) *tunnel.ExitError {
	t.Helper()
	var ee *tunnel.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("want a confirmed end (*tunnel.ExitError), got %v", err)
	}
	return ee
}

// gone: no process (not even a zombie) has this pid.
func gone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

// procStat is [state, ppid, pgrp, session] of pid; nil once it is gone.
func procStat(pid int) []string {
	st, err := proc.ReadStat(pid)
	if err != nil {
		return nil
	}
	return []string{string(st.State), strconv.Itoa(st.PPID), strconv.Itoa(st.Pgrp), strconv.Itoa(st.Session)}
}

// childrenOf lists the processes whose parent is pid, with their state.
func childrenOf(pid int) map[int]string {
	out := map[int]string{}
	for _, c := range proc.Children(pid) {
		out[c.PID] = string(c.State)
	}
	return out
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// serveInProcess runs a Server in this process (waiting for its own
// children only) until the test ends.
func serveInProcess(t *testing.T, cfg Config) string {
	t.Helper()
	if cfg.Token == nil {
		cfg.Token = []byte(testToken)
	}
	if cfg.Certificate == nil {
		cfg.Certificate = testCertificate()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// get does a GET and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: probeTransport(), Timeout: eventually}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

// execOutput runs a command to its end and returns its stdout and stderr.
func execOutput(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// probe does a GET and returns the status code, or -1 when there is none.
func probe(url string) int {
	c := &http.Client{Transport: probeTransport(), Timeout: eventually}
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// child waits until the shim has one child and it runs the program comm,
// and returns its pid.
func (p *shimProc) child(t *testing.T, comm string) int {
	t.Helper()
	var pid int
	NewWithT(t).Eventually(func() string {
		kids := childrenOf(p.pid())
		if len(kids) != 1 {
			return ""
		}
		for pid = range kids {
		}
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return strings.TrimSpace(string(b))
	}).WithTimeout(eventually).WithPolling(time.Millisecond).Should(Equal(comm))
	return pid
}

func keys(m map[int]string) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
