package proc

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestParseStat(t *testing.T) {
	tail := " 5 6 7 8 9 10 11 12 13 250 50" // fields 5-15: pgrp 5, session 6, utime 250, stime 50 ticks
	for _, tc := range []struct {
		name, line string
		want       Stat
		bad        bool
	}{
		{name: "plain", line: "42 (sleep) S 7" + tail, want: Stat{PID: 42, Comm: "sleep", PPID: 7, Pgrp: 5, Session: 6, State: 'S', CPU: 3 * time.Second}},
		{name: "name with spaces and parentheses", line: "42 (a (b) c) T 1" + tail, want: Stat{PID: 42, Comm: "a (b) c", PPID: 1, Pgrp: 5, Session: 6, State: 'T', CPU: 3 * time.Second}},
		{name: "zombie", line: "42 (x) Z 9" + tail, want: Stat{PID: 42, Comm: "x", PPID: 9, Pgrp: 5, Session: 6, State: 'Z', CPU: 3 * time.Second}},
		{name: "no closing parenthesis", line: "42 (x S 1" + tail, bad: true},
		{name: "too few fields", line: "42 (x) S 1 2 3", bad: true},
		{name: "ppid not a number", line: "42 (x) S y" + tail, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parseStat(42, []byte(tc.line))
			if tc.bad {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	g := NewWithT(t)
	s, err := ReadStat(os.Getpid())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.PID).To(Equal(os.Getpid()))
	g.Expect(s.PPID).To(Equal(os.Getppid()))
	g.Expect(string(s.State)).To(BeElementOf("R", "S"))
	_, err = ReadStat(-1)
	g.Expect(err).To(HaveOccurred())
	rss, err := Memory(os.Getpid(), "VmRSS")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rss).To(BeNumerically(">", 0))
}
