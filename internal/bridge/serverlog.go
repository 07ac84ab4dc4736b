package bridge

import "github.com/go-logr/logr"

// serverLog is a supervisor's logger: every line names the McpServer and
// its serverName. The named logger is built per line, not kept: built
// once, it would hold its encoder's buffer (about 1 KiB with zap) for the
// supervisor's life, on every replica for every server it holds, to log a
// few lines in that life (docs/design.md, "Replicas and ownership": memory).
type serverLog struct {
	base       logr.Logger
	mcpserver  string // namespace/name
	serverName string
}

// logger is the named logger, for work that logs many lines and keeps it
// only as long as that work (a stdio child's stderr, per child).
func (l serverLog) logger() logr.Logger {
	return l.base.WithValues("mcpserver", l.mcpserver, "serverName", l.serverName)
}

// Info and Error log one line as the named logger would, reporting their
// own caller's line.
func (l serverLog) Info(msg string, kv ...any) {
	l.logger().WithCallDepth(1).Info(msg, kv...)
}

func (l serverLog) Error(err error, msg string, kv ...any) {
	l.logger().WithCallDepth(1).Error(err, msg, kv...)
}
