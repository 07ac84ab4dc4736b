package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
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
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	for out, pkg := range map[string]string{shimBin: "./cmd/shim", fixtureBin: "./test/fixture/cmd/mcp-fixture"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg+":", err)
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
