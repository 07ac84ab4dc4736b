// Package chart holds no code: its tests check the Helm chart
// charts/mcp-bridge with the Helm SDK (lint, render, install on a real
// kube-apiserver) and keep it from drifting from config/default.
package chart
