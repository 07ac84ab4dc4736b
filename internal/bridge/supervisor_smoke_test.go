package bridge

import (
	"context"
	"slices"
	"syscall"
	"testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

func TestStdioConnectsPublishesAndRecoversFromKill(t *testing.T) {
	s, reg := startSupervisor(t, stdioPolicy("--tools=3"))
	sn := waitFor(t, s, "Ready", isReady)
	if got := len(reg.Tools("ns")); got != 3+8 { // --tools=3 and the fixture's 8 built-in tools
		t.Fatalf("registry has %d tools", got)
	}
	before := toolNames(sn.Tools)
	if !slices.Contains(before, "mcp__fx__echo") {
		t.Fatalf("echo not published: %v", before)
	}
	res, err := s.CallTool(context.Background(), "pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := pidOf(t, res)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sn = waitFor(t, s, "Ready in generation 2", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && sn.Generation == 2 })
	if !slices.Equal(before, toolNames(sn.Tools)) {
		t.Fatalf("tools changed across reconnect: %v -> %v", before, toolNames(sn.Tools))
	}
	t.Logf("server info: %+v", *sn.ServerInfo)
}
