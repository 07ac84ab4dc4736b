package shim

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// reaper starts the shim's children and collects their exit status.
//
// In a container the shim is PID 1, and it also makes itself a child
// subreaper (proc.BecomeSubreaper): every orphaned descendant (an npx
// launcher's node process, a daemon that left the process group) is
// re-parented to it and must be waited for, or it stays a zombie. Waiting for "any child"
// would steal the exit status of the tunnel's own child from whoever waits
// for that specific pid; so with orphans set, one loop owns every wait: on
// SIGCHLD it reaps every zombie child with wait4(-1, WNOHANG) and hands the
// status of a registered pid to its waiter. A child is registered under the
// same lock as its start, so its status cannot be reaped before its waiter
// exists. exec.Cmd.Wait is never called.
//
// Without orphans (a shim running inside another program, e.g. a test),
// each child is waited for by pid, and nothing else is touched.
type reaper struct {
	orphans bool

	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
	sigc    chan os.Signal
	stop    chan struct{}
	stopped chan struct{}
}

func newReaper(orphans bool) *reaper {
	return &reaper{orphans: orphans, waiters: map[int]chan syscall.WaitStatus{}}
}

// run collects zombies until close; only with orphans does it do anything.
func (r *reaper) run() {
	if !r.orphans {
		return
	}
	r.sigc = make(chan os.Signal, 1)
	r.stop = make(chan struct{})
	r.stopped = make(chan struct{})
	signal.Notify(r.sigc, syscall.SIGCHLD)
	go func() {
		defer close(r.stopped)
		for {
			r.sweep()
			select {
			case <-r.sigc:
			case <-r.stop:
				return
			}
		}
	}()
}

func (r *reaper) close() {
	if r.stop == nil {
		return
	}
	signal.Stop(r.sigc)
	close(r.stop)
	<-r.stopped
}

// start starts cmd; the channel receives its wait status once it has been
// reaped. The caller releases cmd.Process after that.
func (r *reaper) start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	pid := cmd.Process.Pid
	if !r.orphans {
		go func() { ch <- waitPid(pid) }()
		return ch, nil
	}
	r.waiters[pid] = ch
	return ch, nil
}

// sweep reaps every zombie child and dispatches registered statuses.
func (r *reaper) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws
		}
	}
}

// waitPid waits for one child by pid.
func waitPid(pid int) syscall.WaitStatus {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			return ws
		}
	}
}
