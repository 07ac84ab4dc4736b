package gateway

import "unicode/utf8"

// maxAgentString is how many bytes of a string an agent chose (a tool
// name, a JSON-RPC id, a method) reach an audit line, a log or a span:
// docs/design.md, "Limits", so that a 4 MiB tool name costs the manager nothing beyond
// the request that carried it. See docs/design.md, "Limits".
const maxAgentString = 128

// cut returns s cut to at most maxAgentString bytes, never inside a UTF-8
// sequence. A short string is returned as it is, without allocating.
func cut(s string) string {
	if len(s) <= maxAgentString {
		return s
	}
	i := maxAgentString
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
