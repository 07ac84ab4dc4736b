// Package argocd runs the Argo CD health check the operator ships
// (config/argocd/health.lua) the way Argo CD runs it: with
// github.com/yuin/gopher-lua, the object as the global obj, only the base,
// package and table libraries, and a one-second budget. Its tests hold the
// check's table over McpServers captured from the controller's envtest
// suite (testdata/health_test.yaml, in the style of Argo CD's own), and
// compare each verdict with kstatus's, which Flux uses.
// See docs/integrations.md.
package argocd
