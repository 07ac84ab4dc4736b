package gateway

import (
	"sync"
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
//
// Refused calls are answered at once, so an agent that ignores refusals
// can make thousands a second: they are folded into at most one line per
// identity and namespace a second, which says how many refusals went
// unwritten since the previous one (foldedRefusals); the metric
// mcpbridge_gateway_refusals_total counts every one.
func (v *view) audit(public string, tool registry.Tool, outcome string, d time.Duration) {
	var folded int
	if outcome == "refused" {
		var write bool
		if folded, write = v.refusals.admit(time.Now()); !write {
			return
		}
	}
	user := "anonymous" // --gateway-auth=none
	if u := v.caller.Load(); u != nil {
		user = u.Name
	}
	server := ""
	if tool.Owner != "" {
		server = serverOf(tool)
	}
	kv := []any{"user", user, "tool", cut(public), "server", server, "outcome", outcome, "durationSeconds", d.Seconds()}
	if folded > 0 {
		kv = append(kv, "foldedRefusals", folded)
	}
	v.e.auditLog.Info("tools/call", kv...)
}

// refusalFold lets one refused call's audit line a second through and
// counts the others.
type refusalFold struct {
	mu     sync.Mutex
	last   time.Time
	folded int
}

// refusalLineEvery is how often a view writes a refused call's audit line.
const refusalLineEvery = time.Second

// admit says whether a refusal at now gets its line, and how many were
// folded since the last line.
func (f *refusalFold) admit(now time.Time) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() && now.Sub(f.last) < refusalLineEvery {
		f.folded++
		return 0, false
	}
	n := f.folded
	f.last, f.folded = now, 0
	return n, true
}
