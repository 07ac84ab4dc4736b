package testenv

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Go benchmarks that measure a design target (docs/design.md, "How it
// is tested") time each iteration themselves: a target is a percentile,
// which ns/op (a mean) cannot show.

// Latencies are the durations of one measurement, one per iteration.
type Latencies []time.Duration

// Percentile is the nearest-rank percentile p of l; 0 when l is empty.
func (l Latencies) Percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Report reports the p50 and p99 of l as the metrics name-p50-unit and
// name-p99-unit, in unit ("ms" or "us").
func (l Latencies) Report(b *testing.B, name, unit string) {
	b.Helper()
	if len(l) == 0 {
		return
	}
	per := map[string]time.Duration{"ms": time.Millisecond, "us": time.Microsecond}[unit]
	for _, p := range []float64{50, 99} {
		b.ReportMetric(float64(l.Percentile(p))/float64(per), fmt.Sprintf("%s-p%.0f-%s", name, p, unit))
	}
}

// Target logs a figure beside its design target and whether it is met;
// a benchmark never fails for a missed target. Benchmarks' logs are always
// printed.
func Target(b *testing.B, figure string, got time.Duration, target string, met bool) {
	b.Helper()
	verdict := "met"
	if !met {
		verdict = "NOT met"
	}
	b.Logf("%s: %s; target (docs/design.md) %s: %s", figure, got, target, verdict)
}

// LoadAvg is the 1-minute load average, or "?" where /proc has none:
// benchmarks log it, since other work on the machine moves their tails.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
