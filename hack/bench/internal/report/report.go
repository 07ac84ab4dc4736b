// Package report holds what the benchmark programs under hack/bench share
// for their tables: percentiles, the goal column and the machine's load,
// and the CPU profile some of them write on request.
package report

import (
	"math"
	"slices"
	"time"

	"github.com/mcpbridge/operator/internal/testenv"
)

// Percentile is the nearest-rank percentile p of xs; 0 when xs is empty.
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// YesNo fills a "Met" column; a missed goal stands out in bold.
func YesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// LoadAvg is the 1-minute load average, or "?" where /proc has none.
func LoadAvg() string { return testenv.LoadAvg() }
