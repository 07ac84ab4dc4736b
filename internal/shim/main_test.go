package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/mcpbridge/operator/internal/testenv"
)

// Binaries built once for the package: the shim itself (process-level
// tests run it as a real process, as a container would) and the fixture
// MCP server.
var shimBin, fixtureBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shim-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shimBin = filepath.Join(dir, "shim")
	fixtureBin = filepath.Join(dir, "mcp-fixture")
	for out, pkg := range map[string]string{shimBin: "./cmd/shim", fixtureBin: "./test/fixture/cmd/mcp-fixture"} {
		if err := testenv.Build(out, pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
