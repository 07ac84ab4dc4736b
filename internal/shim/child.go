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
	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// child is the server process of one tunnel, in its own process group.
type child struct {
	pid    int      // also the process group id
	stdin  *os.File // our write end of its stdin
	stdout *os.File // our read end of its stdout
	grace  time.Duration
	group  *proc.Group

	endOnce sync.Once
	reason  tunnel.EndReason   // what ended the tunnel first; set in endOnce
	ws      syscall.WaitStatus // set before exited is closed
	exited  <-chan struct{}    // the child itself has been reaped
	reaped  <-chan struct{}    // ... and every member of its group we can wait for
}

// startChild starts argv directly (no shell) with the shim's environment,
// in a process group of its own (SIGKILL should the shim die without
// ending it). Stderr is the shim's own stderr, passed down as the same
// file: the child's lines reach the container log unchanged and the shim
// copies nothing. The reaper owns every wait (see reaper).
func startChild(r *reaper, argv []string, stderr *os.File, grace time.Duration) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	proc.OwnGroup(cmd, syscall.SIGKILL)
	pipes, err := proc.NewPipes(cmd, false)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	status, err := r.start(cmd)
	pipes.Started()
	if err != nil {
		pipes.Close()
		return nil, err
	}
	g := proc.NewGroup(cmd.Process.Pid, pipes.Stdin, grace)
	c := &child{pid: cmd.Process.Pid, stdin: pipes.Stdin, stdout: pipes.Stdout, grace: grace,
		group: g, exited: g.Exited(), reaped: g.Reaped()}
	g.Watch(func() { c.ws = <-status }, func() {
		c.end(tunnel.EndExited)
		_ = cmd.Process.Release()
	})
	return c, nil
}

// end ends the tunnel's child: its stdin is closed at once, SIGTERM goes
// to the group after the grace and SIGKILL after another. The first reason
// sticks; later calls do nothing.
func (c *child) end(reason tunnel.EndReason) {
	c.endOnce.Do(func() {
		c.reason = reason
		c.group.End()
	})
}

// terminate is end in a hurry (the shim itself is being stopped): SIGTERM
// to the group at once, SIGKILL after one grace.
func (c *child) terminate() {
	c.end(tunnel.EndShutdown)
	c.group.Hurry()
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
			c.end(tunnel.EndPipeClosed)
		}
	}()
}
