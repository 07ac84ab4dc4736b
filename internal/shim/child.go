package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/internal/proc"
)

// child is the server process of one tunnel, in its own process group.
type child struct {
	pid    int // also the process group id
	proc   *os.Process
	stdin  *os.File // our write end of its stdin
	stdout *os.File // our read end of its stdout
	grace  time.Duration

	endOnce   sync.Once
	reason    EndReason // what ended the tunnel first; set in endOnce
	hurryOnce sync.Once
	hurry     chan struct{} // closed by terminate
	status    <-chan syscall.WaitStatus
	ws        syscall.WaitStatus // set before exited is closed
	exited    chan struct{}      // the child itself has been reaped
	reaped    chan struct{}      // ... and every member of its group we can wait for
}

// startChild starts argv directly (no shell) with the shim's environment,
// in a process group of its own. Stderr is the shim's own stderr, passed
// down as the same file: the child's lines reach the container log
// unchanged and the shim copies nothing.
func startChild(r *reaper, argv []string, stderr *os.File, grace time.Duration) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	// Its own group, so that ending the tunnel also kills a launcher's
	// grandchildren; SIGKILL should the shim die without ending it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Our own pipes rather than exec's: nothing waits on exec's copiers, and
	// a grandchild that holds stdout open cannot hide the child's exit.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	status, err := r.start(cmd)
	closeAll(inR, outW) // the child has its copies
	if err != nil {
		closeAll(inW, outR)
		return nil, err
	}
	c := &child{
		pid: cmd.Process.Pid, proc: cmd.Process, stdin: inW, stdout: outR, grace: grace,
		status: status, exited: make(chan struct{}), reaped: make(chan struct{}), hurry: make(chan struct{}),
	}
	go c.watch()
	return c, nil
}

// watch waits for the child, then kills and reaps what is left of its
// process group: the tunnel may only be confirmed closed after that.
func (c *child) watch() {
	c.ws = <-c.status
	close(c.exited)
	c.end(EndExited)
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	proc.ReapGroup(c.pid)
	_ = c.proc.Release()
	close(c.reaped)
}

// end ends the tunnel's child: its stdin is closed at once, SIGTERM goes
// to the group after the grace and SIGKILL after another. The first reason
// sticks; later calls do nothing.
func (c *child) end(reason EndReason) {
	c.endOnce.Do(func() {
		c.reason = reason
		_ = c.stdin.Close()
		if reason != EndExited {
			go c.escalate()
		}
	})
}

// terminate is end in a hurry (the shim itself is being stopped): SIGTERM
// to the group at once, SIGKILL after one grace.
func (c *child) terminate() {
	c.end(EndShutdown)
	c.hurryOnce.Do(func() { close(c.hurry) })
}

func (c *child) escalate() {
	if proc.Stopped(c.pid) {
		// A stopped child reads no stdin and handles no SIGTERM: waiting
		// for it would only hold the close barrier.
		c.signal(syscall.SIGKILL)
		return
	}
	timer := time.NewTimer(c.grace)
	defer timer.Stop()
	hurry := c.hurry
	next := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for len(next) > 0 {
		select {
		case <-c.exited:
			return
		case <-hurry:
			hurry = nil
			if next[0] != syscall.SIGTERM {
				continue // SIGTERM is out already; SIGKILL is due within a grace
			}
		case <-timer.C:
		}
		c.signal(next[0])
		next = next[1:]
		timer.Reset(c.grace)
	}
}

// signal signals the group while the child has not been reaped: once it
// has, watch kills the rest itself, and its pid may be reused after that.
func (c *child) signal(sig syscall.Signal) {
	select {
	case <-c.exited:
	default:
		_ = syscall.Kill(-c.pid, sig)
	}
}

// exitString says how the child ended, for the log.
func (c *child) exitString() string {
	if c.ws.Signaled() {
		return "signal: " + c.ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(c.ws.ExitStatus())
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// startMessage explains a start failure without Go's wrapping noise.
func startMessage(argv0 string, err error) string {
	var pe *os.PathError
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return fmt.Sprintf("%q: executable file not found in $PATH", argv0)
	case errors.As(err, &pe):
		return fmt.Sprintf("%q: %v", argv0, pe.Err)
	}
	return err.Error()
}

// pipeClosed: the child closed its stdin or stdout. It is most likely
// exiting; if it is not within the grace, the tunnel ends, as a Local
// stdio connection would be lost.
func (c *child) pipeClosed() {
	go func() {
		t := time.NewTimer(c.grace)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
			c.end(EndPipeClosed)
		}
	}()
}
