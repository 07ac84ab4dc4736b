package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/internal/proc"
)

// child is a process the demo started and must stop.
type child struct {
	*proc.Process
	logPath string
	pidFile string // <dir>/<name>.pid, for `make demo-down`
}

// startChild starts cmd with its output in <dir>/<name>.log, in its own
// process group (so that the terminal's Ctrl-C does not reach it before the
// demo decides the order), with SIGTERM should the demo itself be killed,
// and records its pid for `make demo-down`.
func startChild(name, dir string, cmd *exec.Cmd) (*child, error) {
	c := &child{pidFile: filepath.Join(dir, name+".pid"), logPath: filepath.Join(dir, name+".log")}
	log, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = log, log
	if c.Process, err = proc.StartProcess(name, cmd, true, syscall.SIGTERM); err != nil {
		return nil, err
	}
	return c, writePid(c.pidFile, c.Pid())
}

// stop sends SIGTERM, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) error {
	defer os.Remove(c.pidFile)
	return c.Stop(grace)
}

func writePid(path string, pid int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// process is one entry of /proc.
type process struct {
	pid, ppid int
	args      []string
}

// processes lists the live processes; zombies are skipped (they have no
// cmdline).
func processes() ([]process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := proc.ReadStat(pid)
		cmdline, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil || len(cmdline) == 0 {
			continue // gone meanwhile, or a zombie
		}
		out = append(out, process{pid: pid, ppid: stat.PPID, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")})
	}
	return out, nil
}

// childrenOf lists the live children of ppid.
func childrenOf(ppid int) ([]process, error) {
	all, err := processes()
	if err != nil {
		return nil, err
	}
	var out []process
	for _, p := range all {
		if p.ppid == ppid {
			out = append(out, p)
		}
	}
	return out, nil
}

// sameProcess is true while pid still runs args (not a reused pid).
func sameProcess(p process) bool {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "cmdline"))
	return err == nil && string(cmdline) == strings.Join(p.args, "\x00")+"\x00"
}

// prepareDir refuses to run over a live demo and otherwise starts from an
// empty state directory, holding this process's pid.
func prepareDir(dir string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if pid, ok := livePid(f, name); ok {
			return fmt.Errorf("%s (pid %d) from an earlier demo is still running: stop it with `make demo-down`", name, pid)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writePid(filepath.Join(dir, "demo.pid"), os.Getpid())
}

// livePid reads a pid file and tells whether that pid still runs a program
// named name (so a reused pid does not count).
func livePid(file, name string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return 0, false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return pid, filepath.Base(argv0) == name
}
