// Package testcluster starts a real single-node Kubernetes cluster built from
// source (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd, runc, CNI and kubelet) for the e2e suite and the benchmarks
// that need Pods that really run.
//
// It runs only inside hack/e2e-sandbox.sh, which gives the run its own mount,
// network and PID namespaces, private overlays over the paths kubelet and
// containerd write to, and files over the sysctls kubelet sets, so that the
// machine never changes; Start refuses to run anywhere else. Binaries come
// from bin/k8s (hack/build-envtest.sh) and bin/node (hack/build-node.sh),
// images from bin/images (make image).
//
// The cluster is the one a platform engineer would recognise: client
// certificates for every component, RBAC and Node authorization,
// service-account tokens and the kube-root-ca.crt ConfigMap. What it lacks is
// kube-proxy (Service ClusterIPs do not route) and DNS. See docs/design.md,
// "How it is tested".
package testcluster
