// Package testenv starts a real control plane (kube-apiserver and etcd, via
// controller-runtime's envtest) with the operator's CRDs installed, for the
// API and controller test suites.
//
// The binaries come from KUBEBUILDER_ASSETS or, when that is unset, from
// <module root>/bin/k8s, where `make envtest` builds them. A missing control
// plane is an error, never a skipped test.
//
// Build compiles the module's own programs (the shim, the fixture server,
// the manager) for tests and hack programs that run them as real processes:
// every `go build` of the tests and of hack/ goes through it (but the
// image builder's, a module of its own). Latencies and
// Target are what the Go benchmarks of design targets share: percentiles
// as metrics, and the target logged beside the figure with met or not.
// FreeAddr hands out loopback addresses for the flags of the processes they
// start, from below the kernel's ephemeral range and each to one test
// process at a time, and LoopbackCertificate a certificate for serving
// HTTPS on them.
package testenv
