# shellcheck shell=bash
# Sourced by hack/build-envtest.sh and hack/build-node.sh: how the Kubernetes
# binaries are compiled from the pinned modules in hack/envtest (the Go
# module proxy is reachable; setup-envtest's download bucket is not).

k8s_version=v1.37.2
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done
unset pkg

# The envtest control plane: bin/k8s.
envtest_bins=(kube-apiserver kubectl etcd)

# envtest_entry prints the cache entry of the envtest binaries.
envtest_entry() {
  echo "$cache/envtest-$(cache_key "$root/hack/build-envtest.sh" "$root/hack/lib/bincache.sh" \
    "$root/hack/lib/k8s.sh" "$root/hack/envtest/go.mod" "$root/hack/envtest/go.sum" \
    "$root/hack/envtest/etcd/go.mod" "$root/hack/envtest/etcd/go.sum" "$root/hack/envtest/etcd/main.go" \
    -- "$k8s_version")"
}

# k8s_download [etcd]: downloads the modules the builds need, the Kubernetes
# module's and (with "etcd") etcd's, at once.
k8s_download() {
  local pids=() p rc=0
  (cd "$root/hack/envtest" && go mod download) &
  pids+=($!)
  if [ "${1:-}" = etcd ]; then
    (cd "$root/hack/envtest/etcd" && go mod download) &
    pids+=($!)
  fi
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return "$rc"
}

# k8s_build DIR BIN...: compiles the Kubernetes commands among BIN in ONE go
# build, so that the packages they share compile once, and etcd (its own
# module) beside it; both land in DIR.
k8s_build() {
  local dir=$1 b pkgs=() etcd=0 pid rc=0
  shift
  for b in "$@"; do
    case "$b" in
      etcd) etcd=1 ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    esac
  done
  mkdir -p "$dir"
  if [ "$etcd" = 1 ]; then
    (cd "$root/hack/envtest/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "$k8s_ldflags" -o "$dir/etcd" .) &
    pid=$!
  fi
  if [ ${#pkgs[@]} -gt 0 ]; then
    (cd "$root/hack/envtest" && CGO_ENABLED=0 go build -trimpath -ldflags "$k8s_ldflags" -o "$dir/" "${pkgs[@]}") || rc=$?
  fi
  if [ "$etcd" = 1 ]; then wait "$pid" || rc=$?; fi
  return "$rc"
}
