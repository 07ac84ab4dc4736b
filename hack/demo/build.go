package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/mcpbridge/operator/internal/testenv"
)

// build runs the same idempotent steps as `make envtest fixtures` and builds
// the manager into the state directory, so that its command line names the
// demo (which is how the demo's test tells its processes apart).
func (d *demo) build(ctx context.Context) error {
	steps := [][]string{
		{filepath.Join(d.root, "hack", "build-envtest.sh")},
		{filepath.Join(d.root, "hack", "install-fixtures.sh")},
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "bin"), 0o755); err != nil {
		return err
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = d.root
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(s[0]), err)
		}
	}
	return testenv.BuildContext(ctx, nil, filepath.Join(d.dir, "bin", "manager"), "./cmd/manager")
}
