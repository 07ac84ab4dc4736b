package testenv

import (
	"syscall"
	"time"
)

// CPUTime is this process's user and system CPU time, GC included: the
// benchmarks report it per operation beside ns/op because, on a machine
// busy with other work, it moves far less than wall time, which counts the
// waits for a CPU.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
