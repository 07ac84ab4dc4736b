package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
)

// Tests against @modelcontextprotocol/server-everything (TypeScript SDK),
// installed into test/node by `make fixtures` (hack/install-fixtures.sh).
// See test/node/README.md for how it is started.

// everythingEntry is server-everything's entry point; a missing Node or
// package fails the test: these tests are part of the contract.
// See docs/design.md, "How it is tested".
func everythingEntry(t *testing.T) (node, entry string) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	entry = filepath.Join(filepath.Dir(self), "..", "..", "test", "node", "node_modules",
		"@modelcontextprotocol", "server-everything", "dist", "index.js")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (%v): install Node 20 and run `make fixtures`", err)
	}
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("@modelcontextprotocol/server-everything is not installed (%v): run `make fixtures`", err)
	}
	return node, entry
}

// everythingPolicy gives Node time to start (~300 ms, more under -race load)
// and a reconnect budget that outlasts the test's 20 s bounds.
func everythingPolicy(p *policy.Policy) *policy.Policy {
	p.ServerName = "ev"
	p.ConnectionTimeout = 20 * time.Second
	p.Reconnect.MaxAttempts = 200
	return p
}

// everythingDirectTools lists every tool (all pages) over a plain go-sdk
// client connection, sorted by name. The client declares the capabilities
// the supervisor declares (none): server-everything registers get-roots-list
// only for clients that support roots.
func everythingDirectTools(t *testing.T, transport mcp.Transport) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "v0"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("direct connect: %v", err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("direct tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

func everythingSorted(names []string) []string {
	names = slices.Clone(names)
	slices.Sort(names)
	return names
}

// everythingEcho calls server-everything's echo tool.
func everythingEcho(t *testing.T, s *Supervisor, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	res, err := s.CallTool(ctx, "echo", map[string]any{"message": msg})
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if err := ResultError(res); err != nil {
		t.Fatalf("echo: %v", err)
	}
	if got, want := RenderText(res), "Echo: "+msg; got != want {
		t.Fatalf("echo answered %q, want %q", got, want)
	}
}

// everythingSameResultAsJSON checks that a call forwarded as JSON (the
// gateway's path, which posts the request itself) gets the same result from
// a server written with another SDK as the SDK's own CallTool.
func everythingSameResultAsJSON(t *testing.T, s *Supervisor, tool, args string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	viaSDK, err := s.CallTool(ctx, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s through the SDK: %v", tool, err)
	}
	raw, isError, err := s.CallToolJSON(ctx, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s as JSON: %v", tool, err)
	}
	var viaJSON mcp.CallToolResult
	if err := json.Unmarshal(raw, &viaJSON); err != nil {
		t.Fatalf("%s as JSON: %v in %s", tool, err, raw)
	}
	want, _ := json.Marshal(viaSDK)
	got, _ := json.Marshal(&viaJSON)
	if string(got) != string(want) || isError != viaSDK.IsError {
		t.Fatalf("%s: as JSON (isError %v)\n%s\nthrough the SDK (isError %v)\n%s", tool, isError, got, viaSDK.IsError, want)
	}
}

// everythingCheckTools compares the supervisor's published raw names with a
// direct listing of the same server.
func everythingCheckTools(t *testing.T, sn Snapshot, direct []string) {
	t.Helper()
	got := everythingSorted(httpRawNames(sn.Tools))
	if len(direct) == 0 || !slices.Equal(got, direct) {
		t.Fatalf("supervisor published %v,\ndirect client lists %v", got, direct)
	}
	for _, tl := range sn.Tools {
		if tl.Name != registry.PublicName("ev", tl.RawName) {
			t.Errorf("tool %q published as %q", tl.RawName, tl.Name)
		}
	}
}

// everythingChildPID is the pid of the live generation's stdio child.
func everythingChildPID(t *testing.T, s *Supervisor) int {
	t.Helper()
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	if g == nil {
		t.Fatal("no live generation")
	}
	l, ok := g.link.(*stdioLink)
	if !ok {
		t.Fatalf("live link is %T, not stdio", g.link)
	}
	return l.group.Pid()
}

// server-everything over stdio: connect, list every tool, call echo, then
// recover the identical tool set after the child is killed.
func TestEverythingStdioConnectsListsCallsAndRecoversAfterKill(t *testing.T) {
	node, entry := everythingEntry(t)
	direct := everythingDirectTools(t, &mcp.CommandTransport{
		Command:           exec.Command(node, entry, "stdio"),
		TerminateDuration: time.Second,
	})

	p := stdioPolicy()
	p.Stdio = &policy.Stdio{Command: "node", Args: []string{entry, "stdio"}}
	start := time.Now()
	s, reg := startSupervisor(t, everythingPolicy(p))
	sn1 := waitFor(t, s, "Ready", isReady)
	t.Logf("Ready after %v: %+v, %d tools", time.Since(start), *sn1.ServerInfo, len(sn1.Tools))
	everythingCheckTools(t, sn1, direct)
	if got := toolNames(reg.Tools("ns")); !slices.Equal(got, toolNames(sn1.Tools)) {
		t.Fatalf("registry %v, snapshot %v", got, toolNames(sn1.Tools))
	}
	everythingEcho(t, s, "hello over stdio")

	pid := everythingChildPID(t, s)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	sn2 := waitFor(t, s, "Ready in generation 2", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2 })
	t.Logf("recovered %v after the kill", time.Since(killed))
	if got, want := toolNames(sn2.Tools), toolNames(sn1.Tools); !slices.Equal(got, want) {
		t.Fatalf("tools changed across the restart: %v -> %v", want, got)
	}
	if got, want := httpToolsJSON(t, sn2.Tools), httpToolsJSON(t, sn1.Tools); got != want {
		t.Fatalf("tool definitions changed across the restart:\n%s\n->\n%s", want, got)
	}
	if newPID := everythingChildPID(t, s); newPID == pid {
		t.Fatalf("still talking to the killed child %d", pid)
	}
	everythingEcho(t, s, "hello again")
}

// everythingProc is server-everything serving Streamable HTTP as a child in
// its own process group.
type everythingProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output bytes.Buffer
	exited chan struct{}
}

func (p *everythingProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.Write(b)
}

func (p *everythingProc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// kill ends the whole process group and reaps the child.
func (p *everythingProc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// everythingStartHTTP starts server-everything on port and waits until it
// accepts connections; it is killed when the test ends.
func everythingStartHTTP(t *testing.T, node, entry string, port int) *everythingProc {
	t.Helper()
	p := &everythingProc{exited: make(chan struct{})}
	p.cmd = exec.Command(node, entry, "streamableHttp")
	p.cmd.Env = append(scrubbedEnv(os.Environ(), nil), "PORT="+strconv.Itoa(port))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start server-everything: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	NewWithT(t).Eventually(func() error {
		select {
		case <-p.exited:
			return StopTrying(fmt.Sprintf("server-everything exited before listening on %s: %v\n%s", addr, p.cmd.ProcessState, p))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}, eventually, 20*time.Millisecond).Should(Succeed(), func() string {
		return fmt.Sprintf("server-everything does not accept connections on %s\n%s", addr, p)
	})
	return p
}

// server-everything over Streamable HTTP (2025-11-25 with a session):
// connect, list every tool, call echo, then recover the identical tool set
// after the server is killed and started again on the same port.
func TestEverythingStreamableHTTPConnectsListsCallsAndRecoversAfterRestart(t *testing.T) {
	node, entry := everythingEntry(t)
	port := freeLoopbackPort(t)
	proc := everythingStartHTTP(t, node, entry, port)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"
	direct := everythingDirectTools(t, &mcp.StreamableClientTransport{Endpoint: url})

	p := everythingPolicy(httpPolicy(url))
	// A probe waits half the interval for Node's answer: 500 ms holds under
	// -race on a loaded machine (100 ms did not), and a loss still shows
	// long before the SDK's own SSE retries give up.
	p.HealthCheckInterval = time.Second
	s, _ := startSupervisor(t, p)
	sn1 := waitFor(t, s, "Ready", isReady)
	if sn1.ServerInfo.ProtocolVersion != httpStatefulVersion {
		t.Errorf("protocol %s, want %s", sn1.ServerInfo.ProtocolVersion, httpStatefulVersion)
	}
	everythingCheckTools(t, sn1, direct)
	everythingEcho(t, s, "hello over HTTP")
	everythingSameResultAsJSON(t, s, "echo", `{"message":"as JSON"}`)
	everythingSameResultAsJSON(t, s, "get-structured-content", `{"location":"Chicago"}`)
	everythingSameResultAsJSON(t, s, "get-tiny-image", `{}`)
	everythingSameResultAsJSON(t, s, "get-sum", `{"a":"not a number"}`) // a tool error

	proc.kill()
	killed := time.Now()
	lost := waitFor(t, s, "the loss to be noticed", func(sn Snapshot) bool { return sn.Phase != v1alpha1.PhaseReady })
	t.Logf("loss noticed %v after the kill: %v", time.Since(killed), lost.LastError)
	// With healthCheckIntervalMs set, a failed probe (within about a
	// second here) is the loss; the SDK's own SSE retries take longer.
	// See docs/design.md, "Detecting loss".
	if lost.LastError == nil || lost.LastError.Stage != StageHealthCheck {
		t.Errorf("the loss was not found by the health check: %v", lost.LastError)
	}
	if _, err := s.CallTool(context.Background(), "echo", map[string]any{"message": "x"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("call while the server is down: %v, want ErrUnavailable", err)
	}

	everythingStartHTTP(t, node, entry, port)
	restarted := time.Now()
	sn2 := waitFor(t, s, "Ready again", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2 })
	t.Logf("recovered %v after the restart (generation %d)", time.Since(restarted), sn2.Generation)
	if got, want := toolNames(sn2.Tools), toolNames(sn1.Tools); !slices.Equal(got, want) {
		t.Fatalf("tools changed across the restart: %v -> %v", want, got)
	}
	if got, want := httpToolsJSON(t, sn2.Tools), httpToolsJSON(t, sn1.Tools); got != want {
		t.Fatalf("tool definitions changed across the restart:\n%s\n->\n%s", want, got)
	}
	everythingEcho(t, s, "hello again")
}
