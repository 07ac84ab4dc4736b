package testenv

import (
	"fmt"
	"os"
	"os/exec"
)

// Build compiles a main package of this module (e.g. "./cmd/shim") into
// out, statically, for tests that run it as a real process: the shim, the
// fixture MCP server. The compiler's output goes to stderr.
func Build(out, pkg string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}
