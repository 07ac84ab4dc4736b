package proc

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// OwnGroup makes cmd the leader of a process group of its own, so that
// ending it also ends a launcher's grandchildren (npx, uvx), and asks the
// kernel to send it deathsig should this process die first (0: none).
func OwnGroup(cmd *exec.Cmd, deathsig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = deathsig
}

// Pipes are a child's stdin and stdout (and stderr when asked), made with
// os.Pipe rather than by exec.Cmd: nothing waits on exec's copiers, so a
// grandchild that holds stdout open cannot hide the child's exit, and Wait
// never closes what a reader still reads.
type Pipes struct {
	Stdin  *os.File // our write end of the child's stdin
	Stdout *os.File // our read end of its stdout
	Stderr *os.File // our read end of its stderr; nil unless asked for
	child  []*os.File
}

// NewPipes attaches new pipes to cmd's stdin and stdout, and to its stderr
// when withStderr is set. After cmd.Start (successful or not), call
// Started; call Close to release our ends.
func NewPipes(cmd *exec.Cmd, withStderr bool) (*Pipes, error) {
	p := &Pipes{}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.Stdin, p.child = inW, append(p.child, inR)
	outR, outW, err := os.Pipe()
	if err != nil {
		p.Started()
		p.Close()
		return nil, err
	}
	p.Stdout, p.child = outR, append(p.child, outW)
	cmd.Stdin, cmd.Stdout = inR, outW
	if withStderr {
		errR, errW, err := os.Pipe()
		if err != nil {
			p.Started()
			p.Close()
			return nil, err
		}
		p.Stderr, p.child = errR, append(p.child, errW)
		cmd.Stderr = errW
	}
	return p, nil
}

// Started closes the child's ends: the child has its own copies.
func (p *Pipes) Started() { closeFiles(p.child...) }

// Close closes our ends (stdin, stdout and stderr, whichever exist).
func (p *Pipes) Close() { closeFiles(p.Stdin, p.Stdout, p.Stderr) }

func closeFiles(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Group is a started child that leads its own process group (OwnGroup),
// ended the way a stdio server is ended: stdin closed, then SIGTERM to the
// whole group after a grace, then SIGKILL after another. Once the leader is
// reaped, what is left of the group is killed and every member that is our
// child (orphans that came back to us as a subreaper) is reaped too. See
// docs/design.md, "stdio children".
//
// How the leader is waited for stays with the owner (exec.Cmd.Wait, or a
// reaper that owns every wait of a PID 1): see Watch.
type Group struct {
	pid    int
	stdin  io.Closer
	grace  time.Duration
	exited chan struct{} // the leader has been reaped
	reaped chan struct{} // ... and the rest of its group killed and reaped

	endOnce   sync.Once
	hurryOnce sync.Once
	hurry     chan struct{}
}

// NewGroup takes charge of a started leader pid. stdin (nil for none) is
// closed first when the group is ended; grace is the wait between stdin
// close, SIGTERM and SIGKILL. Call Watch next.
func NewGroup(pid int, stdin io.Closer, grace time.Duration) *Group {
	return &Group{pid: pid, stdin: stdin, grace: grace,
		exited: make(chan struct{}), reaped: make(chan struct{}), hurry: make(chan struct{})}
}

// Watch waits for the leader with wait (the owner's wait strategy: it
// returns once the leader has been reaped), runs onExit (if set), then
// kills and reaps what is left of the group. It returns at once.
func (g *Group) Watch(wait, onExit func()) {
	go func() {
		wait()
		close(g.exited)
		if onExit != nil {
			onExit()
		}
		_ = syscall.Kill(-g.pid, syscall.SIGKILL)
		ReapGroup(g.pid)
		close(g.reaped)
	}()
}

// Pid is the leader's pid, which is also the group's id.
func (g *Group) Pid() int { return g.pid }

// Exited is closed once the leader has been reaped.
func (g *Group) Exited() <-chan struct{} { return g.exited }

// Reaped is closed once the leader and every member of the group that is
// our child have been reaped: only then is the server really gone.
func (g *Group) Reaped() <-chan struct{} { return g.reaped }

// End closes the leader's stdin at once, then escalates to SIGTERM and
// SIGKILL of the group, a grace apart, while the leader lives. A stopped
// leader (SIGSTOP) reads no stdin and handles no SIGTERM: it gets SIGKILL
// at once. Later calls do nothing.
func (g *Group) End() {
	g.endOnce.Do(func() {
		if g.stdin != nil {
			_ = g.stdin.Close()
		}
		select {
		case <-g.exited:
		default:
			go g.escalate()
		}
	})
}

// Hurry is End in a hurry (this process is being stopped): SIGTERM to the
// group at once, SIGKILL after one grace.
func (g *Group) Hurry() {
	g.End()
	g.hurryOnce.Do(func() { close(g.hurry) })
}

func (g *Group) escalate() {
	if Stopped(g.pid) {
		g.Signal(syscall.SIGKILL)
		return
	}
	timer := time.NewTimer(g.grace)
	defer timer.Stop()
	hurry := g.hurry
	next := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for len(next) > 0 {
		select {
		case <-g.exited:
			return
		case <-hurry:
			hurry = nil
			if next[0] != syscall.SIGTERM {
				continue // SIGTERM is out already; SIGKILL is due within a grace
			}
		case <-timer.C:
		}
		g.Signal(next[0])
		next = next[1:]
		timer.Reset(g.grace)
	}
}

// Signal signals the whole group while the leader has not been reaped:
// once it has, Watch kills the rest itself, and the pid may be reused.
func (g *Group) Signal(sig syscall.Signal) {
	select {
	case <-g.exited:
	default:
		_ = syscall.Kill(-g.pid, sig)
	}
}
