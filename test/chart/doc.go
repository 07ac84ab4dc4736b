// Package chart holds no code: its tests check the Helm chart
// charts/mcp-bridge with the Helm SDK (lint, render, install on a real
// kube-apiserver) and keep it from drifting from config/default. The
// module's cmd/chart-release installs the chart on the real node of
// `make test-e2e` (test/e2e) with the same SDK.
package chart
