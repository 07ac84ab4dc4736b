package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/internal/testenv"
)

// startHTTPFixture serves the in-repo fixture over Streamable HTTP on a free
// loopback port, which the fixture picks and announces as "listening on URL"
// in its log; the HTTP sample is pointed at it (no fixed port that may be
// taken).
func (d *demo) startHTTPFixture() (string, error) {
	cmd := exec.Command(filepath.Join(d.root, "bin", "mcp-fixture"), "--http=127.0.0.1:0", "--server-name=web-fixture", "--tools=3")
	cmd.Dir = d.root
	var err error
	if d.fixture, err = startChild("mcp-fixture", d.dir, cmd); err != nil {
		return "", err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		log, _ := os.ReadFile(d.fixture.logPath)
		lines := strings.Split(string(log), "\n")
		for _, line := range lines[:len(lines)-1] { // complete lines only
			if url, ok := strings.CutPrefix(line, "listening on "); ok {
				return url, nil
			}
		}
		select {
		case <-d.fixture.Done():
			return "", fmt.Errorf("the HTTP fixture exited: %v; see %s", d.fixture.Err(), d.fixture.logPath)
		default:
		}
	}
	return "", fmt.Errorf("the HTTP fixture did not announce its address in 10s; see %s", d.fixture.logPath)
}

// startManager runs ./cmd/manager (built by build) against the demo's
// apiserver, from the repository root so that the samples' relative commands
// (bin/mcp-fixture, test/node/...) resolve, and waits for /readyz.
func (d *demo) startManager(ctx context.Context) error {
	gateway, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	d.gateway = gateway
	probes, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	replica, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	// The demo's HTTP fixture listens on loopback, which the egress policy
	// refuses unless allowed (see docs/design.md, "Egress policy").
	cmd := exec.Command(filepath.Join(d.dir, "bin", "manager"),
		"--gateway-bind-address="+gateway, "--gateway-auth=none", "--gateway-tls=false",
		"--metrics-bind-address=0", "--health-probe-bind-address="+probes,
		// One replica: its endpoint for the others on loopback.
		"--replica-bind-address="+replica,
		// The loopback upstreams of the demo are allowed, and it has no node
		// to run Pods on: its stdio servers run as children of the manager
		// (the Local runtime).
		"--upstream-allow-cidrs=127.0.0.0/8,::1/128", "--local-stdio-namespaces=*")
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.kubeconfig)
	if d.manager, err = startChild("manager", d.dir, cmd); err != nil {
		return err
	}
	d.say("Manager running (pid %d, log %s)", d.manager.Pid(), d.rel(d.manager.logPath))

	probe := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.manager.Done():
			return fmt.Errorf("the manager exited at start-up: %v; see %s", d.manager.Err(), d.manager.logPath)
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := probe.Get("http://" + probes + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager is not ready after 30s; see %s", d.manager.logPath)
		}
	}
}

// stopManager stops the manager, which disposes its MCP server children
// within its own 30 s budget. If it has to be killed, its children (each in
// its own process group) would be orphaned, so they are killed too.
func (d *demo) stopManager() error {
	kids, _ := childrenOf(d.manager.Pid())
	err := d.manager.stop(40 * time.Second)
	var orphans []string
	for _, k := range kids {
		if sameProcess(k) {
			_ = syscall.Kill(k.pid, syscall.SIGKILL)
			orphans = append(orphans, strconv.Itoa(k.pid))
		}
	}
	if len(orphans) > 0 {
		err = errors.Join(err, fmt.Errorf("the manager left server processes behind (killed: %s)", strings.Join(orphans, ", ")))
	}
	return err
}
