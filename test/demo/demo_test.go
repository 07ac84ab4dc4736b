// Package demo_test runs `make demo` non-interactively (hack/demo with
// --exit-after-recovery) and checks what a user would see, and that it leaves
// no process behind.
package demo_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbridge/operator/internal/testenv"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

func TestDemoRecoversAndCleansUp(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(root, "bin", "k8s", b)); err != nil {
			// The demo would build them, but a cold build outlasts go test's timeout.
			t.Fatalf("bin/k8s/%s is missing: run `make envtest` first", b)
		}
	}
	// As a subreaper, this process inherits every orphan the demo leaves, so
	// "nothing left" can be checked exactly, whatever the leftovers' names.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "demo")
	if err := testenv.Build(bin, "./hack/demo"); err != nil {
		t.Fatal(err)
	}

	state := filepath.Join(tmp, "state")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--exit-after-recovery", "--dir="+state)
	cmd.Dir = root
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // let it clean up
	cmd.WaitDelay = time.Minute
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	begin := time.Now()
	err = cmd.Run()
	t.Logf("demo ran for %s; its output:\n%s", time.Since(begin).Round(100*time.Millisecond), out.String())
	if err != nil {
		t.Errorf("demo: %v", err)
	}

	checkOutput(t, out.String())
	checkNothingLeft(t, state)
}

// checkOutput reads the two tables the demo prints: after every sample is
// Ready, and after the killed server recovered.
func checkOutput(t *testing.T, out string) {
	t.Helper()
	_, afterReady, ok := strings.Cut(out, "==> Every sample is Ready")
	if !ok {
		t.Fatal(`the output lacks "Every sample is Ready"`)
	}
	ready := parseTable(afterReady)
	if len(ready) < 3 {
		t.Fatalf("want at least 3 samples in the first table, got %v", ready)
	}
	transports := map[string]bool{}
	for name, row := range ready {
		transports[row["TRANSPORT"]] = true
		if row["PHASE"] != "Ready" || row["GENERATION"] != "1" {
			t.Errorf("%s before the kill: phase %s, generation %s; want Ready, 1", name, row["PHASE"], row["GENERATION"])
		}
	}
	if !transports["stdio"] || !transports["streamable-http"] {
		t.Errorf("want stdio and streamable-http samples, got transports %v", transports)
	}

	m := regexp.MustCompile(`==> Killing mcpserver/(\S+)'s server process \(bin/mcp-fixture, pid (\d+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("the output does not say which server process was killed")
	}
	killed := m[1]
	_, afterRecovery, ok := strings.Cut(out, "==> mcpserver/"+killed+" recovered in")
	if !ok {
		t.Fatalf("the output does not say that %s recovered", killed)
	}
	recovered := parseTable(afterRecovery)
	for name := range ready {
		row, want := recovered[name], "1"
		if name == killed {
			want = "2"
		}
		if row["PHASE"] != "Ready" || row["GENERATION"] != want {
			t.Errorf("%s after the recovery: phase %q, generation %q; want Ready, %s", name, row["PHASE"], row["GENERATION"], want)
		}
	}
	checkGateway(t, afterRecovery)
	if !strings.Contains(out, "==> Stopped in") {
		t.Error(`the output lacks "Stopped in"`)
	}
}

// checkGateway checks the step after the recovery: tools listed and the
// stdio fixture's echo called through the MCP gateway.
func checkGateway(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`==> Listing tools through the MCP gateway at http://127\.0\.0\.1:\d+/namespaces/default/mcp\n    (\d+) tools from (\d+) servers: `).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("the output does not list the tools served by the gateway")
	}
	if tools, _ := strconv.Atoi(m[1]); tools == 0 {
		t.Error("the gateway lists no tools")
	}
	if servers, _ := strconv.Atoi(m[2]); servers < 3 {
		t.Errorf("the gateway lists tools from %d servers, want at least 3", servers)
	}
	if !regexp.MustCompile(`==> Calling mcp__\S+__echo through the gateway\n    result: hello from the gateway\n`).MatchString(out) {
		t.Error("the output lacks the echo result through the gateway")
	}
}

// parseTable parses the first `kubectl get -o wide` table in s (indented by
// the demo) into rows by NAME, each a map from column header to value. Cells
// are cut at the header's column starts, so an empty cell (RUNTIME of a
// streamable-http server) stays empty.
func parseTable(s string) map[string]map[string]string {
	rows := map[string]map[string]string{}
	var header []string
	var starts []int
	for _, line := range strings.Split(s, "\n") {
		fields := strings.Fields(line)
		switch {
		case header == nil && len(fields) > 0 && fields[0] == "NAME":
			header = fields
			for i, r := range line {
				if r != ' ' && (i == 0 || line[i-1] == ' ') {
					starts = append(starts, i)
				}
			}
		case header != nil && (!strings.HasPrefix(line, "    ") || len(fields) == 0):
			return rows
		case header != nil:
			row := map[string]string{}
			for c, h := range header {
				start, end := starts[c], len(line)
				if c+1 < len(starts) && starts[c+1] < end {
					end = starts[c+1]
				}
				if start < end {
					row[h] = strings.TrimSpace(line[start:end])
				}
			}
			rows[row["NAME"]] = row
		}
	}
	return rows
}

// checkNothingLeft fails for any live process that the demo left: orphans
// are re-parented to this (subreaper) process; anything still attached to a
// live parent has an ancestor among those, or names the state directory.
func checkNothingLeft(t *testing.T, state string) {
	t.Helper()
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo did not remove its state directory %s (err %v)", state, err)
	}
	me := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		stat, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		cmdline, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue // gone meanwhile
		}
		// stat is "pid (comm) state ppid ...", and comm may hold spaces.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		switch {
		case ppid == me && fields[0] == "Z":
			// An orphan that exited: reap it, and say so, since a demo that
			// stops in order waits for every process it started.
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			t.Errorf("pid %d outlived its parent (exited since, status %v)", pid, ws)
		case ppid == me:
			t.Errorf("the demo left pid %d running: %s", pid, args)
		case strings.Contains(args, state):
			t.Errorf("pid %d still runs from the demo's state directory: %s", pid, args)
		}
	}
}
