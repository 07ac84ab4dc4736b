#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, kubectl, etcd) from the Go
# module proxy into bin/k8s. setup-envtest's download bucket is unreachable
# here, so the binaries are compiled at pinned versions from the modules in
# hack/envtest. A binary that is already present is not rebuilt.
#
# hack/build-node.sh uses the same recipe for the node's Kubernetes binaries:
# ENVTEST_BIN_DIR=DIR hack/build-envtest.sh kubelet kube-controller-manager kube-scheduler
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="${ENVTEST_BIN_DIR:-$root/bin/k8s}"
mkdir -p "$out"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(kube-apiserver kubectl etcd)

k8s_version=v1.37.2
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  ldflags+=" -X $pkg.gitTreeState=clean"
done

missing=()
for b in "${wanted[@]}"; do
  [ -x "$out/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "Kubernetes binaries (${wanted[*]}) present in $out"
  exit 0
fi

echo "Building ${missing[*]} from source into $out."
echo "A cold build takes about 10 minutes on 2 cores; later runs reuse bin/."

build() { # name, module dir, package
  echo "  go build $3 -> $out/$1"
  (cd "$2" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$1.tmp" "$3")
  mv "$out/$1.tmp" "$out/$1"
}

for b in "${missing[@]}"; do
  case "$b" in
    etcd) build etcd "$root/hack/envtest/etcd" . ;;
    kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler)
      build "$b" "$root/hack/envtest" "k8s.io/kubernetes/cmd/$b" ;;
    *) echo "build-envtest.sh: unknown binary $b" >&2; exit 2 ;;
  esac
done
for b in "${wanted[@]}"; do
  case "$b" in
    etcd) "$out/etcd" --version | sed -n 1p ;;
    kubectl) "$out/kubectl" version --client 2>/dev/null | sed -n 1p ;;
  esac
done
