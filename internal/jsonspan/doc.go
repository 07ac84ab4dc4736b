// Package jsonspan finds where a JSON value ends in bytes already known to
// be valid JSON, without decoding or copying it: the gateway reads an
// agent's message in place, the supervisor finds a call's result in the
// upstream's answer, and the registry walks a schema into canonical form,
// each with these same steps. A result may be one string of megabytes, so a
// string is skipped by searching for its closing quote, not byte by byte
// (docs/design.md, "Budgets"). Valid is the check that makes bytes known to
// be valid JSON, within the nesting the SDK decodes; AppendCompact copies
// such bytes without the whitespace between their tokens.
package jsonspan
