package gateway

import (
	"time"

	"github.com/mcpbridge/operator/internal/registry"
)

// audit writes the one line of a tools/call: who called (the username of
// the TokenReview), in which namespace, which tool (its public name) of
// which McpServer, how it ended and how long it took. Arguments and results
// are never written: they may hold secrets; the tool's name, which the agent
// chose, is cut to maxAgentString bytes. See docs/design.md,
// "Shared-cluster rules".
//
// outcome is success, tool_error (the tool reported an error), error (the
// call failed), unknown_tool, or denied (a tool of a server the caller may
// not use; the caller was answered as for an unknown tool), or refused (a
// budget of the identity or the namespace was spent, budgets.go).
func (v *view) audit(public string, tool registry.Tool, outcome string, d time.Duration) {
	user := "anonymous" // --gateway-auth=none
	if u := v.caller.Load(); u != nil {
		user = u.Name
	}
	server := ""
	if tool.Owner != "" {
		server = serverOf(tool)
	}
	v.e.auditLog.Info("tools/call", "user", user, "tool", cut(public), "server", server,
		"outcome", outcome, "durationSeconds", d.Seconds())
}
