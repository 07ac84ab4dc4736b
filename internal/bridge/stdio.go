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
	log   serverLog
	grace time.Duration // between stdin close, SIGTERM and SIGKILL
	sniff func([]byte)  // optional: sees every line the server writes
	share *share        // the namespace's (Options.Shares)
}

func (d *stdioDialer) dial(_ context.Context, _ func(error)) (link, error) {
	cmd := exec.Command(d.spec.Command, d.spec.Args...)
	cmd.Dir = d.spec.Cwd
	cmd.Env = scrubbedEnv(os.Environ(), d.spec.Env)
	// SIGKILL if the manager dies without disposing it.
	proc.OwnGroup(cmd, syscall.SIGKILL)
	pipes, err := proc.NewPipes(cmd, true)
	if err != nil {
		return nil, err
	}
	err = cmd.Start()
	pipes.Started()
	if err != nil {
		pipes.Close()
		return nil, fmt.Errorf("start %q: %w", d.spec.Command, err)
	}
	l := &stdioLink{stdin: pipes.Stdin, stdout: pipes.Stdout, sniff: d.sniff, share: d.share,
		exited: make(chan struct{}), stderrDone: make(chan struct{})}
	go func() {
		defer close(l.stderrDone)
		logStderr(pipes.Stderr, d.log.logger().WithValues("pid", cmd.Process.Pid))
	}()
	l.group = proc.NewGroup(cmd.Process.Pid, pipes.Stdin, d.grace)
	l.group.Watch(func() { l.waitErr = cmd.Wait() }, nil)
	go l.released()
	return l, nil
}

type stdioLink struct {
	group      *proc.Group
	stdin      *os.File
	stdout     *os.File
	sniff      func([]byte) // sees every line the server writes
	share      *share       // the namespace's (pacedStdio)
	exited     chan struct{}
	stderrDone chan struct{}
	waitErr    error // set before exited is closed
}

// exitError says how the child ended; valid once closed() is closed.
func (l *stdioLink) exitError() error {
	if l.waitErr == nil {
		return errors.New("the server process exited")
	}
	return fmt.Errorf("the server process exited: %w", l.waitErr)
}

func (l *stdioLink) transport() mcp.Transport {
	r, w := pacedStdio(l.stdout, l.stdin, l.share)
	if l.sniff != nil {
		r = &sniffReader{ReadCloser: r, fn: l.sniff}
	}
	return &mcp.IOTransport{Reader: r, Writer: w}
}

// released waits until the child and what was left of its process group
// (an npx-style launcher's grandchildren) have been reaped, then releases
// the pipes: only then is the generation closed.
func (l *stdioLink) released() {
	<-l.group.Reaped()
	_ = l.stdin.Close()
	_ = l.stdout.Close()
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
func (l *stdioLink) close() { l.group.End() }

func (l *stdioLink) closed() <-chan struct{} { return l.exited }

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
