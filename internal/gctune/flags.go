package gctune

import (
	"flag"
	"fmt"
	"time"
)

// The manager's defaults: --gc-quiet-headroom and --gc-busy-percent.
const (
	DefaultQuietHeadroom = 5 * time.Second
	DefaultBusyPercent   = 40
)

// Flags are the collector's flags of the manager.
type Flags struct {
	QuietHeadroom time.Duration
	BusyPercent   int
}

// BindFlags adds --gc-quiet-headroom and --gc-busy-percent to fs.
func (f *Flags) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&f.QuietHeadroom, "gc-quiet-headroom", DefaultQuietHeadroom,
		"the Go heap's headroom between collections holds what the manager allocated in this last interval, "+
			"between GOGC=10 and --gc-busy-percent: a quiet manager holds little garbage; 0 "+
			"turns this and --gc-busy-percent off (the runtime's GOGC=100 stays), as does a GOGC in the environment")
	fs.IntVar(&f.BusyPercent, "gc-busy-percent", DefaultBusyPercent,
		"GOGC while the manager is busy (servers connecting, agents calling): its heap grows by this share of what "+
			"is live between collections, and by at least 32 MiB; lower holds less memory at a peak and spends more CPU on collections")
}

// Validate refuses a busy GOGC under the floor.
func (f *Flags) Validate() error {
	if f.BusyPercent < quietGCFloor {
		return fmt.Errorf("--gc-busy-percent=%d must be at least %d", f.BusyPercent, quietGCFloor)
	}
	return nil
}
