package shim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/shim/tunnel"
	"github.com/mcpbridge/operator/test/fixture"
)

// Tests of the shim binary as a real process, with the fixture MCP server
// (test/fixture) as its command, spoken to by a go-sdk client over the
// tunnel.

func TestFixtureToolsThroughTheTunnel(t *testing.T) {
	g := NewWithT(t)
	shim := startShim(t, shortGrace, fixtureBin, "--tools=3")
	tun := dialOK(t, shim.addr)
	cs := connect(t, tun)

	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		g.Expect(err).NotTo(HaveOccurred())
		names = append(names, tool.Name)
	}
	g.Expect(names).To(ContainElements("echo", "pid", "tool_0000", "tool_0002"))
	g.Expect(callText(t, cs, "echo", map[string]any{"text": "through the tunnel"})).To(Equal("through the tunnel"))

	// The child's environment is the shim's, and never holds the token.
	env := callText(t, cs, "env", nil)
	g.Expect(env).To(ContainSubstring("PATH="))
	g.Expect(env).NotTo(ContainSubstring(testToken))

	// The child is the shim's child, in a process group of its own.
	pid := fixturePID(t, cs)
	st := procStat(pid)
	g.Expect(st[1]).To(Equal(itoa(shim.pid())), "parent")
	g.Expect(st[2]).To(Equal(itoa(pid)), "process group")

	// Closing the session closes stdin: the fixture exits by itself.
	g.Expect(cs.Close()).To(Succeed())
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Code).To(Equal(0))
	g.Expect(ee.Reason).To(Equal(tunnel.EndStdinClosed))
	g.Expect(gone(pid)).To(BeTrue(), "confirmed, yet the child is still there")
}

func TestOneFreshChildPerTunnel(t *testing.T) {
	g := NewWithT(t)
	events := filepath.Join(t.TempDir(), "events")
	shim := startShim(t, shortGrace, fixtureBin, "--events-file="+events)
	var pids []int
	for range 3 {
		tun := dialOK(t, shim.addr)
		cs := connect(t, tun)
		pids = append(pids, fixturePID(t, cs))
		g.Expect(cs.Close()).To(Succeed())
		exitError(t, waitDone(t, tun, eventually))
	}
	g.Expect(pids[0]).NotTo(Equal(pids[1]))
	g.Expect(pids[1]).NotTo(Equal(pids[2]))
	evs, err := fixture.ReadEvents(events)
	g.Expect(err).NotTo(HaveOccurred())
	lts := fixture.Lifetimes(evs)
	g.Expect(lts).To(HaveLen(3))
	_, _, overlap := fixture.Overlap(lts)
	g.Expect(overlap).To(BeFalse())
}

func TestChildExitEndsTheTunnelWithItsStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		call string // a tool call that ends the child, or ""
		list bool   // list the tools first
		code int
	}{
		{"exits by itself", []string{"--exit-after=200ms"}, "", false, 0},
		{"crashes after initialize", []string{"--crash-after-initialize"}, "", true, 1},
		{"crashes mid-call", nil, "crash", false, fixture.CrashExitCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			shim := startShim(t, shortGrace, append([]string{fixtureBin}, tc.args...)...)
			tun := dialOK(t, shim.addr)
			cs := connect(t, tun)
			if tc.list {
				ctx, cancel := context.WithTimeout(context.Background(), eventually)
				_, err := cs.ListTools(ctx, nil)
				cancel()
				g.Expect(err).NotTo(HaveOccurred())
			}
			if tc.call != "" {
				ctx, cancel := context.WithTimeout(context.Background(), eventually)
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.call, Arguments: map[string]any{}})
				cancel()
				g.Expect(err).To(HaveOccurred())
			}
			ee := exitError(t, waitDone(t, tun, eventually))
			g.Expect(ee.Code).To(Equal(tc.code))
			g.Expect(ee.Reason).To(Equal(tunnel.EndExited))
			_ = cs.Wait() // returns: the session ended with the tunnel
		})
	}
}

func TestTunnelCloseKillsTheWholeGroup(t *testing.T) {
	g := NewWithT(t)
	events := filepath.Join(t.TempDir(), "events")
	shim := startShim(t, shortGrace, fixtureBin, "--spawn-grandchild", "--events-file="+events)
	tun := dialOK(t, shim.addr)
	cs := connect(t, tun)
	pid := fixturePID(t, cs)
	var grandchild int
	g.Eventually(func() int {
		evs, _ := fixture.ReadEvents(events)
		for _, e := range evs {
			if e.Kind == fixture.EventGrandchild {
				grandchild = e.PID
			}
		}
		return grandchild
	}).WithTimeout(eventually).ShouldNot(BeZero())
	g.Expect(procStat(grandchild)[2]).To(Equal(itoa(pid)), "the grandchild is in the child's group")

	g.Expect(tun.Stdin().Close()).To(Succeed())
	exitError(t, waitDone(t, tun, eventually))
	// Confirmed means gone, not even a zombie: the shim, as subreaper,
	// reaped the orphaned grandchild too.
	g.Expect(gone(pid)).To(BeTrue(), "child")
	g.Expect(gone(grandchild)).To(BeTrue(), "grandchild")
	g.Expect(childrenOf(shim.pid())).To(BeEmpty())
}

func TestSecondTunnelPreemptsAndWaitsForTheReap(t *testing.T) {
	g := NewWithT(t)
	events := filepath.Join(t.TempDir(), "events")
	// The first child ignores SIGTERM and has a grandchild: the second
	// tunnel opens only once SIGKILL has removed both.
	shim := startShim(t, 300*time.Millisecond, fixtureBin, "--ignore-sigterm", "--spawn-grandchild", "--events-file="+events)
	first := dialOK(t, shim.addr)
	firstCS := connect(t, first)
	firstPID := fixturePID(t, firstCS)

	second := dialOK(t, shim.addr)
	// tunnel.Dial returned: the first child and its group have been reaped.
	g.Expect(gone(firstPID)).To(BeTrue())
	ee := exitError(t, waitDone(t, first, eventually))
	g.Expect(ee.Reason).To(Equal(tunnel.EndPreempted))
	g.Expect(ee.Error()).To(ContainSubstring("after a newer tunnel pre-empted this one"))

	secondCS := connect(t, second)
	g.Expect(fixturePID(t, secondCS)).NotTo(Equal(firstPID))
	g.Expect(callText(t, secondCS, "echo", map[string]any{"text": "second"})).To(Equal("second"))
	g.Expect(secondCS.Close()).To(Succeed())
	exitError(t, waitDone(t, second, eventually))

	evs, err := fixture.ReadEvents(events)
	g.Expect(err).NotTo(HaveOccurred())
	_, _, overlap := fixture.Overlap(fixture.Lifetimes(evs))
	g.Expect(overlap).To(BeFalse(), "two children of the shim were alive at once")
	for _, e := range evs {
		if e.Kind == fixture.EventGrandchild {
			g.Expect(gone(e.PID)).To(BeTrue(), "grandchild %d", e.PID)
		}
	}
}

func TestWrongTokenRefusedByTheBinary(t *testing.T) {
	g := NewWithT(t)
	shim := startShim(t, shortGrace, fixtureBin)
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	for range 20 {
		_, err := tunnel.Dial(ctx, shim.addr, creds("not-the-token-at-all"))
		g.Expect(err).To(MatchError(tunnel.ErrUnauthorized))
	}
	g.Expect(childrenOf(shim.pid())).To(BeEmpty())
	// Logged, rate-limited (20 refusals well within a second or two), and
	// never with the token.
	logged := strings.Count(shim.stderr.String(), "tunnel refused: wrong or missing token")
	g.Expect(logged).To(BeNumerically(">=", 1))
	g.Expect(logged).To(BeNumerically("<", 20))
	g.Expect(shim.stderr.String()).NotTo(ContainSubstring(testToken))
	g.Expect(shim.stderr.String()).NotTo(ContainSubstring("not-the-token-at-all"))
}

func TestBinaryRefusesBadInvocations(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeKeyPair(t, dir)
	tlsFlags := []string{"--tls-cert-file=" + certFile, "--tls-key-file=" + keyFile}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no token file", []string{"--", "cat"}, "refuses to run without --token-file"},
		{"empty token file", []string{"--token-file=/dev/null", "--", "cat"}, "at least 16 bytes"},
		{"no key pair", []string{"--token-file=" + tokenFile, "--", "cat"}, "refuses to run without --tls-cert-file and --tls-key-file"},
		{"key of another certificate", []string{"--token-file=" + tokenFile, "--tls-cert-file=" + certFile,
			"--tls-key-file=" + tokenFile, "--", "cat"}, "TLS key pair"},
		{"no command", append([]string{"--token-file=" + tokenFile}, tlsFlags...), "no command to run"},
		{"unknown flag", []string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := execOutput(shimBin, tc.args...)
			var ee *exec.ExitError
			g.Expect(errors.As(err, &ee)).To(BeTrue(), "%v", err)
			g.Expect(ee.ExitCode()).To(Equal(2))
			g.Expect(out).To(ContainSubstring(tc.want))
		})
	}
}

func TestChildStderrGoesToTheShimsStderr(t *testing.T) {
	g := NewWithT(t)
	shim := startShim(t, shortGrace, "sh", "-c", `printf 'to stderr\tunchanged\n' >&2; exec cat`)
	tun := dialOK(t, shim.addr)
	g.Eventually(shim.stderr.String).WithTimeout(eventually).Should(ContainSubstring("to stderr\tunchanged\n"))
	g.Expect(tun.Stdin().Close()).To(Succeed())
	exitError(t, waitDone(t, tun, eventually))

	// A command that fails at once: its own words reach the log.
	bad := startShim(t, shortGrace, fixtureBin, "--no-such-flag")
	tun = dialOK(t, bad.addr)
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Code).To(Equal(2))
	g.Expect(bad.stderr.String()).To(ContainSubstring("flag provided but not defined: -no-such-flag"))
}

func TestProbesOfTheBinary(t *testing.T) {
	g := NewWithT(t)
	// A child that ignores SIGTERM keeps the shim stopping for a while:
	// readiness fails meanwhile, health does not.
	shim := startShim(t, 2*time.Second, "sh", "-c", `trap "" TERM; exec sleep 3600`)
	for _, path := range []string{tunnel.HealthzPath, tunnel.ReadyzPath} {
		code, _ := get(t, "https://"+shim.addr+path)
		g.Expect(code).To(Equal(http.StatusOK), path)
	}
	tun := dialOK(t, shim.addr)
	shim.child(t, "sleep") // the trap is set
	g.Expect(shim.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(func() int { return probe("https://" + shim.addr + tunnel.ReadyzPath) }).
		WithTimeout(eventually).Should(Equal(http.StatusServiceUnavailable))
	code, _ := get(t, "https://"+shim.addr+tunnel.HealthzPath)
	g.Expect(code).To(Equal(http.StatusOK))
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Reason).To(Equal(tunnel.EndShutdown))
	g.Expect(ee.Signal).To(Equal(syscall.SIGKILL))
}

func TestShimSIGTERMEndsTheChildAndExits(t *testing.T) {
	g := NewWithT(t)
	// Neither process reads stdin; both die of SIGTERM. The grace is far
	// longer than the test allows: only SIGTERM at once ends them in time.
	shim := startShim(t, time.Minute, "sh", "-c", `sleep 3600 & exec sleep 3601`)
	tun := dialOK(t, shim.addr)
	pid := shim.child(t, "sleep")
	var group []int
	g.Eventually(func() []int {
		group = nil
		for _, p := range append([]int{pid}, keys(childrenOf(pid))...) {
			if st := procStat(p); st != nil && st[2] == itoa(pid) {
				group = append(group, p)
			}
		}
		return group
	}).WithTimeout(eventually).Should(HaveLen(2))

	g.Expect(shim.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Signal).To(Equal(syscall.SIGTERM))
	g.Expect(ee.Reason).To(Equal(tunnel.EndShutdown))
	select {
	case <-shim.exited:
	case <-time.After(eventually):
		t.Fatal("the shim did not exit")
	}
	g.Expect(shim.err).NotTo(HaveOccurred())
	for _, p := range group {
		g.Expect(gone(p)).To(BeTrue(), "group member %d", p)
	}
	g.Expect(shim.stderr.String()).To(ContainSubstring("msg=stopped"))
}

func TestDialGivesUpWhileThePreviousChildIsReaped(t *testing.T) {
	g := NewWithT(t)
	// The first child ignores stdin EOF and SIGTERM: with a 2 s grace, the
	// shim needs 4 s to reap it. A tunnel.Dial bounded to 300 ms returns before
	// that: the first tunnel has not ended when it does.
	shim := startShim(t, 2*time.Second, "sh", "-c", `trap "" TERM; exec sleep 3600`)
	first := dialOK(t, shim.addr)
	shim.child(t, "sleep")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		_, err := tunnel.Dial(ctx, shim.addr, creds(testToken))
		dialed <- err
	}()
	select {
	case err := <-dialed:
		g.Expect(err).To(MatchError(context.DeadlineExceeded))
	case <-time.After(eventually):
		t.Fatal("Dial did not return after its context ended")
	}
	select {
	case <-first.Done():
		t.Fatalf("the first tunnel ended before its child could have been killed: %v", first.Err())
	default:
	}
}

func TestStubbornChildGoneWithinTheCloseBarrier(t *testing.T) {
	g := NewWithT(t)
	// Ignores stdin EOF (sleep reads nothing) and SIGTERM (inherited SIG_IGN).
	shim := startShim(t, shortGrace, "sh", "-c", `trap "" TERM; exec sleep 3600`)
	tun := dialOK(t, shim.addr)
	pid := shim.child(t, "sleep") // the trap is set
	began := time.Now()
	g.Expect(tun.Stdin().Close()).To(Succeed())
	ee := exitError(t, waitDone(t, tun, barrier))
	t.Logf("confirmed %v after stdin close", time.Since(began))
	g.Expect(ee.Signal).To(Equal(syscall.SIGKILL))
	g.Expect(ee.Reason).To(Equal(tunnel.EndStdinClosed))
	g.Expect(gone(pid)).To(BeTrue())
}

func TestStoppedChildKilledAtOnce(t *testing.T) {
	g := NewWithT(t)
	// Graces far beyond the barrier: only an immediate SIGKILL meets it.
	shim := startShim(t, 10*time.Second, fixtureBin)
	tun := dialOK(t, shim.addr)
	cs := connect(t, tun)
	pid := fixturePID(t, cs)
	g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	g.Eventually(func() string { return procStat(pid)[0] }).WithTimeout(eventually).Should(Equal("T"))
	g.Expect(tun.Stdin().Close()).To(Succeed())
	ee := exitError(t, waitDone(t, tun, barrier))
	g.Expect(ee.Signal).To(Equal(syscall.SIGKILL))
	g.Expect(gone(pid)).To(BeTrue())
}

func TestMisbehavingChildrenDoNotHurtTheShim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		code    int
	}{
		{"invalid JSON from the fixture", []string{fixtureBin, "--invalid-json-after=100ms"}, -1},
		{"exits mid-message", []string{"sh", "-c", `printf '{"jsonrpc":"2.0","id":1,"resu'; exit 5`}, 5},
		// The client gives up on the garbage while the child still writes.
		{"floods stdout and stderr", []string{"sh", "-c", `head -c 3000000 /dev/zero | tr '\0' x & head -c 300000 /dev/zero | tr '\0' y >&2; wait; exit 4`}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			shim := startShim(t, shortGrace, tc.command...)
			var baseline int
			for i := range 3 {
				tun := dialOK(t, shim.addr)
				ctx, cancel := context.WithTimeout(context.Background(), eventually)
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "v0"}, nil).
					Connect(ctx, &mcp.IOTransport{Reader: tun.Stdout(), Writer: tun.Stdin()}, nil)
				if err == nil {
					// The garbage line breaks the session; the tunnel ends once
					// the client gives up on it.
					err = cs.Wait()
					_ = cs.Close()
				}
				cancel()
				g.Expect(err).To(HaveOccurred())
				ee := exitError(t, waitDone(t, tun, eventually))
				if tc.code >= 0 {
					g.Expect(ee.Code).To(Equal(tc.code))
				}
				code, _ := get(t, "https://"+shim.addr+tunnel.HealthzPath)
				g.Expect(code).To(Equal(http.StatusOK))
				// No file descriptors pile up from tunnel to tunnel. The shim
				// closes the probe's and the tunnel's connections on its own
				// schedule, so a count may briefly sit one above where it
				// settles; a leak never comes back down.
				g.Eventually(func() map[int]string { return childrenOf(shim.pid()) }).WithTimeout(eventually).Should(BeEmpty())
				if i == 0 {
					baseline = openFDs(shim.pid())
				} else {
					g.Eventually(func() int { return openFDs(shim.pid()) }).WithTimeout(eventually).
						Should(BeNumerically("<=", baseline), "fds after tunnel %d", i+1)
				}
			}
			g.Expect(shim.stderr.String()).NotTo(ContainSubstring("panic"))
		})
	}
}

func TestOrphansAreReapedWithoutStealingTheChildsStatus(t *testing.T) {
	g := NewWithT(t)
	// The child double-forks a process that leaves its group and session
	// (setsid) and exits after a second: an orphan re-parented to the shim.
	// The child itself exits 7 when it reads a line.
	shim := startShim(t, shortGrace, "sh", "-c", `(setsid sleep 1 &); read line; exit 7`)
	tun := dialOK(t, shim.addr)
	var orphan int
	g.Eventually(func() int {
		for pid := range childrenOf(shim.pid()) {
			if st := procStat(pid); st != nil && st[3] == itoa(pid) {
				orphan = pid // a session leader: the setsid sleep
			}
		}
		return orphan
	}).WithTimeout(eventually).WithPolling(time.Millisecond).ShouldNot(BeZero())
	g.Eventually(func() bool { return gone(orphan) }).WithTimeout(eventually).Should(BeTrue(), "the orphan stayed a zombie")

	_, err := io.WriteString(tun.Stdin(), "exit now\n")
	g.Expect(err).NotTo(HaveOccurred())
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Code).To(Equal(7))
	g.Expect(ee.Reason).To(Equal(tunnel.EndExited))
	g.Expect(childrenOf(shim.pid())).To(BeEmpty())
}

func TestInstallCopiesTheBinary(t *testing.T) {
	g := NewWithT(t)
	dest := filepath.Join(t.TempDir(), "shim")
	out, err := execOutput(shimBin, "install", dest)
	g.Expect(err).NotTo(HaveOccurred(), out)
	out, err = execOutput(dest, "--help")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("serve stdio tunnels"))
	out, err = execOutput(shimBin, "install")
	g.Expect(err).To(HaveOccurred())
	g.Expect(out).To(ContainSubstring("usage: shim install DEST"))
	g.Expect(strings.Count(out, "\n")).To(Equal(1))
}
