package shim

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies the running executable to dest, mode 0755, through a
// temporary file in dest's directory and a rename, so that dest is never
// seen half written. An init container runs it to put the shim into the
// volume the server's container starts it from: the operator's image is
// distroless and has no cp.
func Install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: find own executable: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".shim-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := io.Copy(tmp, src); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}
