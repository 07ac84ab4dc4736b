package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/internal/proc"
)

// process is one component of the cluster, logging to its own file.
type process struct {
	*proc.Process
	name string
	log  *os.File
}

// startProcess starts bin with args, its output in logDir/name.log.
func startProcess(logDir, name, bin string, args []string, env ...string) (*process, error) {
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	p, err := proc.StartProcess(name, cmd, false, 0)
	if err != nil {
		log.Close()
		return nil, err
	}
	return &process{Process: p, name: name, log: log}, nil
}

// exited reports an error if the process has ended.
func (p *process) exited() error {
	select {
	case <-p.Done():
		return fmt.Errorf("%s exited: %v (see %s)", p.name, p.Err(), p.log.Name())
	default:
		return nil
	}
}

// stop sends SIGTERM, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	_ = p.Stop(grace)
	p.log.Close()
}

// killOthers SIGKILLs every process of this PID namespace but this one and
// its ancestors (the sandbox's init): the containerd shims and containers
// that outlive kubelet and containerd. It is only called inside the sandbox.
func killOthers() error {
	keep := map[int]bool{}
	for pid := os.Getpid(); pid > 0; pid = parentOf(pid) {
		keep[pid] = true
		if pid == 1 {
			break
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || keep[pid] {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// parentOf reads a process's parent from /proc; 0 when it is gone.
func parentOf(pid int) int {
	st, _ := proc.ReadStat(pid)
	return st.PPID
}
