package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/testenv"
)

// fixtureBin is the in-repo fixture server and shimBin the shim of the Pod
// runtime, built once for the package.
var fixtureBin, shimBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bridge-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureBin = filepath.Join(dir, "mcp-fixture")
	shimBin = filepath.Join(dir, "shim")
	for out, pkg := range map[string]string{fixtureBin: "./test/fixture/cmd/mcp-fixture", shimBin: "./cmd/shim"} {
		if err := testenv.Build(out, pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// As the manager does: orphaned grandchildren come back to us.
	if err := proc.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		os.Exit(1)
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
