package shim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
)

// @modelcontextprotocol/server-everything (TypeScript SDK, installed into
// test/node by `make fixtures`) through the shim binary: a third-party
// server, Node start-up and its own protocol version, all through the
// tunnel unchanged.
func TestServerEverythingThroughTheTunnel(t *testing.T) {
	g := NewWithT(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (%v): install Node 20 and run `make fixtures`", err)
	}
	_, self, _, _ := runtime.Caller(0)
	entry := filepath.Join(filepath.Dir(self), "..", "..", "test", "node", "node_modules",
		"@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("@modelcontextprotocol/server-everything is not installed (%v): run `make fixtures`", err)
	}
	shim := startShim(t, shortGrace, node, entry, "stdio")
	for round := range 2 { // a second tunnel gets a fresh server
		tun := dialOK(t, shim.addr)
		cs := connect(t, tun)
		g.Expect(cs.InitializeResult().ProtocolVersion).To(Equal("2025-11-25"))

		ctx, cancel := context.WithTimeout(context.Background(), eventually)
		var names []string
		for tool, err := range cs.Tools(ctx, nil) {
			g.Expect(err).NotTo(HaveOccurred())
			names = append(names, tool.Name)
		}
		cancel()
		g.Expect(names).To(HaveLen(13), "round %d", round) // no roots capability declared
		g.Expect(names).To(ContainElements("echo", "get-sum"))
		g.Expect(callText(t, cs, "echo", map[string]any{"message": "via the shim"})).To(Equal("Echo: via the shim"))
		g.Expect(callText(t, cs, "get-sum", map[string]any{"a": 2, "b": 3})).To(ContainSubstring("5"))

		g.Expect(cs.Close()).To(Succeed())
		exitError(t, waitDone(t, tun, eventually))
		g.Eventually(func() map[int]string { return childrenOf(shim.pid()) }).WithTimeout(eventually).Should(BeEmpty())
	}
}
