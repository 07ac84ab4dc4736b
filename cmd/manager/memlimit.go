package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// A Go heap may grow to twice its live size before the next collection,
// and nothing tells the runtime where the container is cut off: the answers
// already written to agents stay in the heap as garbage, and a burst of
// large results could take the replica past its memory limit into an OOM
// kill that stops every server it owns. Unless GOMEMLIMIT is set, the
// manager sets the runtime's soft limit to a share of its cgroup's, so that
// the collector works harder as the heap nears it (docs/design.md,
// "Budgets").
const memoryLimitShare = 0.9

// cgroupMemoryFiles are the memory limit of cgroup v2 and of v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

func setMemoryLimit(log logr.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, file, ok := cgroupMemoryLimit(cgroupMemoryFiles)
	if !ok {
		return
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go memory limit set below the container's", "containerLimit", limit, "goMemoryLimit", soft, "from", file)
}

// cgroupMemoryLimit is the first limit found in files.
func cgroupMemoryLimit(files []string) (int64, string, bool) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, ok := parseMemoryLimit(string(b))
		return n, f, ok
	}
	return 0, "", false
}

// parseMemoryLimit reads memory.max ("max" when there is none) or v1's
// limit_in_bytes (a number near 2^63 when there is none).
func parseMemoryLimit(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}
