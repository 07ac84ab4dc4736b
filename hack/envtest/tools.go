//go:build tools

// Package tools pins the commands the envtest build needs so that
// `go mod tidy` keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
