// Package proc owns the few Linux process facts and controls that both
// runtimes of a stdio server need around its process group: whether a
// process is stopped, reaping a killed group, and adopting orphans as a
// child subreaper. It depends on nothing but the standard library, so that
// the shim (cmd/shim) stays a small static binary. See docs/design.md,
// "stdio children" and "The shim and the tunnel".
package proc
