//go:build tools

// Package tools pins the commands built from this module so that `go mod
// tidy` keeps their dependencies: the envtest control plane (kube-apiserver,
// kubectl) and the rest of the real node for `make test-e2e` (kubelet,
// kube-controller-manager, kube-scheduler).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
