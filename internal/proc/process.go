package proc

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a helper program that a tool runs and stops in order (a
// control-plane component, a fixture server, the demo's manager): started
// with exec.Cmd, waited for with Wait, stopped with SIGTERM and, after a
// grace, SIGKILL. Stdio servers use Group instead.
type Process struct {
	name  string
	cmd   *exec.Cmd
	group bool
	done  chan struct{}
	err   error // set before done is closed
	once  sync.Once
}

// ErrAlreadyStopped is Stop's answer to every call after the first.
var ErrAlreadyStopped = errors.New("already stopped")

// StartProcess starts cmd and waits for it in the background. With group
// set, cmd leads its own process group (OwnGroup with deathsig), so that a
// terminal's Ctrl-C reaches only the caller, which stops it in order, and
// Stop's SIGKILL reaches the whole group.
func StartProcess(name string, cmd *exec.Cmd, group bool, deathsig syscall.Signal) (*Process, error) {
	if group {
		OwnGroup(cmd, deathsig)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, group: group, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's pid.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended; valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM and waits up to grace; then SIGKILL (to the group, if
// it has one) and an error saying so. A process that had already exited is
// no error. Calls after the first return ErrAlreadyStopped.
func (p *Process) Stop(grace time.Duration) error {
	err := ErrAlreadyStopped
	p.once.Do(func() {
		err = nil
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		if p.group {
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		} else {
			_ = p.cmd.Process.Kill()
		}
		<-p.done
		err = fmt.Errorf("%s (pid %d) did not exit within %s of SIGTERM and was killed", p.name, p.Pid(), grace)
	})
	return err
}
