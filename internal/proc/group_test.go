package proc

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// startGroup starts sh -c script as a Group, waited for with cmd.Wait, and
// returns the first line the script prints (e.g. a grandchild's pid).
func startGroup(t *testing.T, script string, grace time.Duration) (*Group, *exec.Cmd, string) {
	t.Helper()
	g := NewWithT(t)
	cmd := exec.Command("sh", "-c", script)
	OwnGroup(cmd, syscall.SIGKILL)
	pipes, err := NewPipes(cmd, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	pipes.Started()
	group := NewGroup(cmd.Process.Pid, pipes.Stdin, grace)
	group.Watch(func() { _ = cmd.Wait() }, nil)
	t.Cleanup(func() {
		group.Hurry()
		<-group.Reaped()
		pipes.Close()
	})
	line, _ := bufio.NewReader(pipes.Stdout).ReadString('\n')
	return group, cmd, strings.TrimSpace(line)
}

func exitSignal(cmd *exec.Cmd) string {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return "exit " + strconv.Itoa(cmd.ProcessState.ExitCode())
	}
	return ws.Signal().String()
}

func TestGroupEndsWithStdinCloseWhenTheLeaderListens(t *testing.T) {
	g := NewWithT(t)
	// A long grace: the leader must go because stdin closed, not by a signal.
	group, cmd, _ := startGroup(t, `echo ready; cat >/dev/null`, time.Hour)
	group.End()
	g.Eventually(group.Reaped()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(exitSignal(cmd)).To(Equal("exit 0"))
}

func TestGroupEscalatesToSIGTERMThenSIGKILL(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{name: "ignores stdin", script: `echo ready; exec sleep 3600`, want: "terminated"},
		{name: "ignores stdin and SIGTERM", script: `trap '' TERM; echo ready; while :; do sleep 1; done`, want: "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group, cmd, _ := startGroup(t, tc.script, 50*time.Millisecond)
			group.End()
			g.Eventually(group.Reaped()).WithTimeout(30 * time.Second).Should(BeClosed())
			g.Expect(exitSignal(cmd)).To(Equal(tc.want))
		})
	}
}

func TestGroupKillsAStoppedLeaderAtOnce(t *testing.T) {
	g := NewWithT(t)
	group, cmd, _ := startGroup(t, `echo ready; exec sleep 3600`, time.Hour)
	g.Expect(syscall.Kill(group.Pid(), syscall.SIGSTOP)).To(Succeed())
	g.Eventually(func() bool { return Stopped(group.Pid()) }).WithTimeout(10 * time.Second).Should(BeTrue())
	group.End() // with an hour of grace, only the stopped rule ends it
	g.Eventually(group.Reaped()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(exitSignal(cmd)).To(Equal("killed"))
}

func TestGroupHurrySendsSIGTERMAtOnce(t *testing.T) {
	g := NewWithT(t)
	group, cmd, _ := startGroup(t, `echo ready; exec sleep 3600`, time.Hour)
	group.Hurry()
	g.Eventually(group.Reaped()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(exitSignal(cmd)).To(Equal("terminated"))
}

func TestGroupKillsWhatTheLeaderLeavesBehind(t *testing.T) {
	g := NewWithT(t)
	// The leader starts a grandchild in its group and exits by itself.
	group, _, line := startGroup(t, `sleep 3600 & echo $!; wait`, time.Hour)
	grandchild, err := strconv.Atoi(line)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(syscall.Kill(group.Pid(), syscall.SIGKILL)).To(Succeed()) // the leader only
	g.Eventually(group.Reaped()).WithTimeout(30 * time.Second).Should(BeClosed())
	// Gone, not a zombie of ours either: it was re-parented elsewhere or reaped.
	g.Eventually(func() error { return syscall.Kill(grandchild, 0) }).WithTimeout(30 * time.Second).
		Should(MatchError(syscall.ESRCH))
}

func TestProcessStopEscalates(t *testing.T) {
	g := NewWithT(t)
	quiet, err := StartProcess("quiet", exec.Command("sleep", "3600"), true, syscall.SIGKILL)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(quiet.Stop(time.Hour)).To(Succeed(), "SIGTERM is enough for sleep")
	g.Expect(quiet.Stop(time.Hour)).To(MatchError(ErrAlreadyStopped))

	cmd := exec.Command("sh", "-c", `trap '' TERM; echo ready; while :; do sleep 1; done`)
	out, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	stubborn, err := StartProcess("stubborn", cmd, true, syscall.SIGKILL)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = bufio.NewReader(out).ReadString('\n') // the trap is set
	g.Expect(stubborn.Stop(50 * time.Millisecond)).To(MatchError(ContainSubstring("was killed")))
	g.Expect(stubborn.Done()).To(BeClosed())

	_, err = StartProcess("missing", exec.Command("/nonexistent/binary"), false, 0)
	g.Expect(err).To(MatchError(ContainSubstring("start missing")))
}
