package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/mcpbridge/operator/internal/testenv"
)

// build runs the same idempotent steps as `make envtest fixtures` and builds
// the manager into the state directory, so that its command line names the
// demo (which is how the demo's test tells its processes apart). The steps
// run at once: on a first run the control plane's build and npm wait on the
// network while the manager compiles.
func (d *demo) build(ctx context.Context) error {
	steps := [][]string{
		{filepath.Join(d.root, "hack", "build-envtest.sh")},
		{filepath.Join(d.root, "hack", "install-fixtures.sh")},
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "bin"), 0o755); err != nil {
		return err
	}
	errs := make([]error, len(steps)+1)
	var wg sync.WaitGroup
	for i, s := range steps {
		wg.Go(func() { errs[i] = d.runStep(ctx, s) })
	}
	wg.Go(func() {
		errs[len(steps)] = testenv.BuildContext(ctx, nil, filepath.Join(d.dir, "bin", "manager"), "./cmd/manager")
	})
	wg.Wait()
	return errors.Join(errs...)
}

func (d *demo) runStep(ctx context.Context, s []string) error {
	cmd := exec.CommandContext(ctx, s[0], s[1:]...)
	cmd.Dir = d.root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(s[0]), err)
	}
	return nil
}
