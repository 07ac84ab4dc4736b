package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// Build compiles a main package of this module (e.g. "./cmd/shim") into
// out, statically, for tests and programs that run it as a real process:
// the shim, the fixture MCP server, the manager. flags go to `go build`
// before -o (e.g. -trimpath, -overlay=FILE). The compiler's output goes to
// stderr.
func Build(out, pkg string, flags ...string) error {
	return BuildContext(context.Background(), nil, out, pkg, flags...)
}

// BuildContext is Build ended with ctx and with env added to the
// environment (e.g. GOOS=linux for an image).
func BuildContext(ctx context.Context, env []string, out, pkg string, flags ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	build.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if err := build.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}
