package report

import (
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// CPUProfile profiles this process's CPU into path until the returned func
// is called; an empty path profiles nothing.
func CPUProfile(path string) (stop func(), err error) {
	return record(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// Trace writes an execution trace of this process into path (go tool
// trace) until the returned func is called; an empty path traces nothing.
func Trace(path string) (stop func(), err error) {
	return record(path, trace.Start, trace.Stop)
}

func record(path string, start func(io.Writer) error, end func()) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { end(); f.Close() }, nil
}

// WriteProfile writes the runtime/pprof profile name ("allocs", "heap",
// "goroutine", ...) of this process into path.
func WriteProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
