package proc

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestStoppedFollowsSIGSTOPAndSIGCONT(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.Expect(cmd.Start()).To(Succeed())
	pid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	g.Expect(Stopped(pid)).To(BeFalse())
	g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	g.Eventually(func() bool { return Stopped(pid) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(syscall.Kill(pid, syscall.SIGCONT)).To(Succeed())
	g.Eventually(func() bool { return Stopped(pid) }).WithTimeout(10 * time.Second).Should(BeFalse())
	g.Expect(Stopped(-1)).To(BeFalse(), "no such process")
}

func TestReapGroupWaitsForEveryMemberThatIsOurs(t *testing.T) {
	g := NewWithT(t)
	// Two children of ours in one group (the second joins the first's).
	leader := exec.Command("sleep", "3600")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.Expect(leader.Start()).To(Succeed())
	pgid := leader.Process.Pid
	member := exec.Command("sleep", "3600")
	member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	g.Expect(member.Start()).To(Succeed())
	g.Expect(syscall.Kill(-pgid, syscall.SIGKILL)).To(Succeed())
	ReapGroup(pgid)
	// Both were reaped: waiting for either again finds no child.
	for _, pid := range []int{leader.Process.Pid, member.Process.Pid} {
		_, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
		g.Expect(err).To(MatchError(syscall.ECHILD))
	}
	_ = leader.Process.Release()
	_ = member.Process.Release()
}

func TestBecomeSubreaperAdoptsOrphans(t *testing.T) {
	g := NewWithT(t)
	g.Expect(BecomeSubreaper()).To(Succeed())
	// sh leaves a sleeping child behind and exits: the orphan comes to us.
	out, err := exec.Command("sh", "-c", `sleep 3600 >/dev/null 2>&1 & echo $!`).Output()
	g.Expect(err).NotTo(HaveOccurred())
	var orphan int
	_, err = fmt.Sscan(string(out), &orphan)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(syscall.Kill(orphan, syscall.SIGKILL)).To(Succeed())
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(orphan, &ws, 0, nil)
	g.Expect(err).NotTo(HaveOccurred(), "the orphan is not our child")
	g.Expect(pid).To(Equal(orphan))
	g.Expect(ws.Signal()).To(Equal(syscall.SIGKILL))
}
