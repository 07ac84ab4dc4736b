package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// Every line names the server, and reports the line that logged it, not
// serverLog's own.
func TestServerLogNamesTheServerAndItsCaller(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{LogCaller: funcr.All})
	l := serverLog{base: base, mcpserver: "ns/gh", serverName: "github"}
	l.Info("connected", "generation", 1)
	l.Error(errors.New("boom"), "stopped")
	l.logger().Info("from a child")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %q", len(lines), lines)
	}
	for _, line := range lines {
		for _, want := range []string{`"mcpserver"="ns/gh"`, `"serverName"="github"`, `"file"="serverlog_test.go"`} {
			if !strings.Contains(line, want) {
				t.Errorf("line %s lacks %s", line, want)
			}
		}
	}
}
