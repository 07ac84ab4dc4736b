package bridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/proc"
)

// envAllowlist are the manager variables a child inherits; anything
// else, credentials and KUBERNETES_* included, never reaches it.
// See docs/design.md, "stdio children".
var envAllowlist = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TZ", "TMPDIR"}

// scrubbedEnv is the allowlisted part of base plus the spec's variables,
// which win over inherited ones.
func scrubbedEnv(base []string, spec []policy.EnvVar) []string {
	override := make(map[string]bool, len(spec))
	for _, e := range spec {
		override[e.Name] = true
	}
	var out []string
	for _, kv := range base {
		name, _, ok := strings.Cut(kv, "=")
		if ok && allowedEnv(name) && !override[name] {
			out = append(out, kv)
		}
	}
	for _, e := range spec {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

func allowedEnv(name string) bool {
	if strings.HasPrefix(name, "LC_") {
		return true
	}
	for _, a := range envAllowlist {
		if name == a {
			return true
		}
	}
	return false
}

// stdioDialer starts the server as a child in its own process group.
type stdioDialer struct {
	spec  *policy.Stdio
	log   logr.Logger
	grace time.Duration // between stdin close, SIGTERM and SIGKILL
	sniff func([]byte)  // optional: sees every line the server writes
}

func (d *stdioDialer) dial(_ context.Context, _ func(error)) (link, error) {
	cmd := exec.Command(d.spec.Command, d.spec.Args...)
	cmd.Dir = d.spec.Cwd
	cmd.Env = scrubbedEnv(os.Environ(), d.spec.Env)
	// Its own group, so that closing kills launchers' grandchildren too; and
	// SIGKILL if the manager dies without disposing it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	// Our own pipes, so that Wait never closes what the MCP reader still
	// reads and a grandchild holding stdout open cannot hide the exit.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("start %q: %w", d.spec.Command, err)
	}
	closeAll(inR, outW, errW) // the child has its copies
	l := &stdioLink{cmd: cmd, stdin: inW, stdout: outR, grace: d.grace, sniff: d.sniff,
		exited: make(chan struct{}), stderrDone: make(chan struct{})}
	go func() {
		defer close(l.stderrDone)
		logStderr(errR, d.log.WithValues("pid", cmd.Process.Pid))
	}()
	go l.reap()
	return l, nil
}

type stdioLink struct {
	cmd        *exec.Cmd
	stdin      *os.File
	stdout     *os.File
	grace      time.Duration
	sniff      func([]byte) // sees every line the server writes
	exited     chan struct{}
	stderrDone chan struct{}
	waitErr    error // set before exited is closed
	closeOnce  sync.Once
}

// exitError says how the child ended; valid once closed() is closed.
func (l *stdioLink) exitError() error {
	if l.waitErr == nil {
		return errors.New("the server process exited")
	}
	return fmt.Errorf("the server process exited: %w", l.waitErr)
}

func (l *stdioLink) transport() mcp.Transport {
	var r io.ReadCloser = l.stdout
	if l.sniff != nil {
		r = &sniffReader{ReadCloser: l.stdout, fn: l.sniff}
	}
	return &mcp.IOTransport{Reader: r, Writer: l.stdin}
}

// reap waits for the child, then kills what is left of its process group
// (an npx-style launcher's grandchildren) and releases the pipes.
func (l *stdioLink) reap() {
	l.waitErr = l.cmd.Wait()
	pgid := l.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	proc.ReapGroup(pgid) // orphans of the group that came back to us as subreaper
	closeAll(l.stdin, l.stdout)
	// The last stderr lines belong to this generation; a descendant that
	// escaped the group may hold the pipe, so do not wait for it forever.
	select {
	case <-l.stderrDone:
	case <-time.After(stderrDrain):
	}
	close(l.exited)
}

// stderrDrain bounds the wait for a dead child's last stderr lines.
const stderrDrain = 500 * time.Millisecond

// close escalates: stdin closed, then SIGTERM, then SIGKILL to the group.
func (l *stdioLink) close() {
	l.closeOnce.Do(func() {
		_ = l.stdin.Close()
		go l.escalate()
	})
}

func (l *stdioLink) escalate() {
	pgid := l.cmd.Process.Pid
	if proc.Stopped(pgid) {
		// A stopped child reads no stdin and handles no SIGTERM: waiting
		// for it would only hold the close barrier.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-l.exited:
			return
		case <-time.After(l.grace):
			_ = syscall.Kill(-pgid, sig)
		}
	}
}

func (l *stdioLink) closed() <-chan struct{} { return l.exited }

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// stderrLinesPerSecond bounds how much a chatty child can write to our log.
const stderrLinesPerSecond = 20

// logStderr logs the child's stderr line by line, at most
// stderrLinesPerSecond a second, and says how many lines it dropped.
func logStderr(r io.ReadCloser, log logr.Logger) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64*1024)
	var window time.Time
	var inWindow, dropped int
	for {
		line, err := readLine(br)
		if line != "" || err == nil {
			now := time.Now()
			if now.Sub(window) >= time.Second {
				if dropped > 0 {
					log.Info("stderr lines dropped by rate limit", "dropped", dropped)
				}
				window, inWindow, dropped = now, 0, 0
			}
			if inWindow++; inWindow <= stderrLinesPerSecond {
				log.Info("stderr", "line", line)
			} else {
				dropped++
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				log.V(1).Info("stderr read ended", "error", err.Error())
			}
			return
		}
	}
}

// maxStderrLine truncates very long stderr lines instead of buffering them.
const maxStderrLine = 4096

func readLine(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		chunk, isPrefix, err := br.ReadLine()
		if sb.Len() < maxStderrLine {
			sb.Write(chunk[:min(len(chunk), maxStderrLine-sb.Len())])
		}
		if err != nil || !isPrefix {
			return sb.String(), err
		}
	}
}
