package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// killAndRecover kills the stdio fixture's process behind the manager's back
// (as a crash would) and waits for the supervisor to reconnect with a new
// connection generation.
func (d *demo) killAndRecover(ctx context.Context, set *sampleSet) error {
	name := set.stdioFixture
	before, err := d.get(ctx, name)
	if err != nil {
		return err
	}
	pid, err := d.stdioFixturePid()
	if err != nil {
		return err
	}
	d.say("Killing mcpserver/%s's server process (bin/mcp-fixture, pid %d) with SIGKILL", name, pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}

	begin := time.Now()
	phases := []string{string(before.Status.Phase)}
	var after *v1alpha1.McpServer
	err = d.poll(ctx, func() (bool, error) {
		s, err := d.get(ctx, name)
		if err != nil {
			return false, err
		}
		if p := string(s.Status.Phase); p != phases[len(phases)-1] {
			phases = append(phases, p)
		}
		after = s
		return s.Status.Phase == v1alpha1.PhaseReady && s.Status.ConnectionGeneration > before.Status.ConnectionGeneration, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			_ = d.printTable(ctx)
		}
		return fmt.Errorf("mcpserver/%s did not recover: %w", name, err)
	}
	newPid, _ := d.stdioFixturePid()
	d.say("mcpserver/%s recovered in %s (%s): new process pid %d, connection generation %d -> %d",
		name, time.Since(begin).Round(100*time.Millisecond), strings.Join(phases, " -> "), newPid,
		before.Status.ConnectionGeneration, after.Status.ConnectionGeneration)
	return d.printTable(ctx)
}

// stdioFixturePid finds the manager's bin/mcp-fixture child. The HTTP
// fixture is the demo's own child, so exactly one is expected.
func (d *demo) stdioFixturePid() (int, error) {
	kids, err := childrenOf(d.manager.Pid())
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, k := range kids {
		if filepath.Base(k.args[0]) == "mcp-fixture" {
			pids = append(pids, k.pid)
		}
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("want one bin/mcp-fixture child of the manager, found pids %v", pids)
	}
	return pids[0], nil
}
