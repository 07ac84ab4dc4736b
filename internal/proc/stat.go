package proc

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stat is the part of /proc/PID/stat that the operator and its tools read.
type Stat struct {
	PID  int
	Comm string // the command name, as the kernel keeps it (at most 15 bytes)
	// PPID is the parent; Pgrp the process group; Session the session id.
	PPID, Pgrp, Session int
	// State is the one-letter process state: R, S, D, T (stopped), Z (zombie), ...
	State byte
	// CPU is the user + system time the process has used so far.
	CPU time.Duration
}

// clkTck is USER_HZ, the unit of utime and stime in /proc/PID/stat. Linux
// fixes it at 100 for user space whatever the kernel's own tick.
const clkTck = 100

var errShortStat = errors.New("short /proc stat line")

// ReadStat reads /proc/PID/stat. The command name (field 2) may hold spaces
// and parentheses, so the fields are counted from its last ')'.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (Stat, error) {
	open, i := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return Stat{}, errShortStat
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 13 || len(f[0]) != 1 {
		return Stat{}, errShortStat
	}
	var ids [3]int // ppid, pgrp, session
	for k := range ids {
		v, err := strconv.Atoi(f[1+k])
		if err != nil {
			return Stat{}, err
		}
		ids[k] = v
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Stat{}, err
	}
	return Stat{PID: pid, Comm: string(b[open+1 : i]), State: f[0][0], PPID: ids[0], Pgrp: ids[1], Session: ids[2],
		CPU: time.Duration(utime+stime) * time.Second / clkTck}, nil
}

// Stopped reports whether the process is stopped by a signal (state T). A
// stopped process reads no stdin and handles no SIGTERM: closing it
// gracefully would only wait.
func Stopped(pid int) bool {
	s, err := ReadStat(pid)
	return err == nil && s.State == 'T'
}

// Children lists the live processes whose parent is ppid, by scanning
// /proc. Processes that vanish during the scan are left out.
func Children(ppid int) []Stat {
	entries, _ := os.ReadDir("/proc")
	var out []Stat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil && s.PPID == ppid {
			out = append(out, s)
		}
	}
	return out
}

// Memory reads a "kB" field of /proc/PID/status (VmRSS, VmHWM, ...), in bytes.
func Memory(pid int, field string) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no " + field + " in /proc/" + strconv.Itoa(pid) + "/status")
}
