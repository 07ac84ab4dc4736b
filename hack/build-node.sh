#!/usr/bin/env bash
# Builds the real single-node cluster of `make test-e2e` from source at
# pinned versions (no prebuilt binary can be downloaded here), into the
# machine's cache of built binaries, and points bin/node at it (and bin/k8s
# at the envtest control plane, which the node runs too):
#   kubelet, kube-controller-manager, kube-scheduler  (hack/envtest's module)
#   containerd, ctr, containerd-shim-runc-v2            (CGO_ENABLED=0)
#   runc with seccomp                                   (cgo, static libseccomp from Debian's libseccomp-dev)
#   CNI bridge, host-local, loopback
#   pause                                               (gcc -static of kubernetes' build/pause/linux/pause.c)
# When the envtest binaries are missing too, all five Kubernetes commands
# are compiled in one go build. Nothing is installed outside bin/ and the
# cache (hack/lib/bincache.sh). Facts and workarounds: docs/design.md, "How
# it is tested".
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
debs="${DEBS_DIR:-$root/bin/debs}"
# shellcheck source=lib/bincache.sh
. "$root/hack/lib/bincache.sh"
# shellcheck source=lib/k8s.sh
. "$root/hack/lib/k8s.sh"
# shellcheck source=lib/progress.sh
. "$root/hack/lib/progress.sh"

containerd_version=v2.4.2
runc_version=v1.5.3
cni_version=v1.10.0
pause_version=3.10.2 # the sandbox image containerd $containerd_version pins
node_bins=(kubelet kube-controller-manager kube-scheduler containerd ctr containerd-shim-runc-v2 runc
  cni/bridge cni/host-local cni/loopback pause pause.version)

# libseccomp's version is part of the node's key: runc links it.
"$root/hack/debs.sh" libseccomp-dev
cache=$(cache_root)
envtest=$(envtest_entry)
node="$cache/node-$(cache_key "$root/hack/build-node.sh" "$root/hack/lib/bincache.sh" "$root/hack/lib/k8s.sh" \
  "$root/hack/envtest/go.mod" "$root/hack/envtest/go.sum" \
  -- "$k8s_version" "$containerd_version" "$runc_version" "$cni_version" "$pause_version" \
  "$(cat "$debs/libseccomp-dev/VERSION")" "$(gcc --version | sed -n 1p)")"

# go_install DIR PACKAGE... -- GO FLAGS...: builds the packages, all of one
# module at one version, at that module's own go.mod, into DIR.
go_install() {
  local dir=$1 pkgs=()
  shift
  while [ "$1" != -- ]; do pkgs+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  GOBIN="$dir" go install -trimpath "$@" "${pkgs[@]}"
}

# kubelet always asks for the RuntimeDefault seccomp profile, so runc needs
# libseccomp; it is linked statically from the extracted Debian package. The
# default libpathrs tag is left out: it needs a Rust toolchain.
# The package's paths go in CGO_CFLAGS/CGO_LDFLAGS, not in the .pc file: Go's
# build cache keys a cgo package on those variables but not on pkg-config's
# answer, so a path in the .pc file let a cached build from another checkout
# link against a folder that no longer exists.
build_runc() { # DIR
  local seccomp="$debs/libseccomp-dev/usr"
  mkdir -p "$debs/pkgconfig"
  cat >"$debs/pkgconfig/libseccomp.pc" <<PC
Name: libseccomp
Description: libseccomp from Debian's libseccomp-dev $(cat "$debs/libseccomp-dev/VERSION"), linked statically
Version: $(cut -d- -f1 "$debs/libseccomp-dev/VERSION")
Libs: -l:libseccomp.a
Cflags:
PC
  PKG_CONFIG_PATH="$debs/pkgconfig" CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -I$seccomp/include" CGO_LDFLAGS="-O2 -g -L$seccomp/lib/x86_64-linux-gnu" \
    go_install "$1" "github.com/opencontainers/runc@$runc_version" -- -buildmode=pie -tags "seccomp urfave_cli_no_docs"
}

# build_runtime DIR: everything of the node but the Kubernetes commands.
build_runtime() {
  local dir=$1 cmd plugin pkgs=() src
  for cmd in containerd ctr containerd-shim-runc-v2; do
    pkgs+=("github.com/containerd/containerd/v2/cmd/$cmd@$containerd_version")
  done
  CGO_ENABLED=0 go_install "$dir" "${pkgs[@]}" -- -tags "no_btrfs urfave_cli_no_docs" \
    -ldflags "-X github.com/containerd/containerd/v2/version.Version=$containerd_version"
  pkgs=()
  for plugin in main/bridge ipam/host-local main/loopback; do
    pkgs+=("github.com/containernetworking/plugins/plugins/$plugin@$cni_version")
  done
  CGO_ENABLED=0 go_install "$dir/cni" "${pkgs[@]}" --
  build_runc "$dir"
  src=$(cd "$root/hack/envtest" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  gcc -Os -static -DVERSION="$pause_version" -o "$dir/pause" "$src"
  echo "$pause_version" >"$dir/pause.version"
}

# build_all ENVTEST_TMP NODE_TMP K8S_BIN...: the Kubernetes commands in one
# go build beside the rest of the node, then each binary to its entry.
build_all() {
  local etmp=$1 ntmp=$2 pid rc=0 b
  shift 2
  build_runtime "$ntmp" &
  pid=$!
  k8s_build "$ntmp/k8s" "$@" || rc=$?
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || return "$rc"
  for b in "$@"; do
    case "$b" in
      kubelet | kube-controller-manager | kube-scheduler) mv "$ntmp/k8s/$b" "$ntmp/$b" ;;
      *) mkdir -p "$etmp" && mv "$ntmp/k8s/$b" "$etmp/$b" ;;
    esac
  done
  rmdir "$ntmp/k8s"
}

need_envtest=0
envtest_lock=
entry_complete "$envtest" "${envtest_bins[@]}" || { lock "$envtest"; envtest_lock=$lock_fd; need_envtest=1; }
entry_complete "$envtest" "${envtest_bins[@]}" || need_envtest=2
entry_complete "$node" "${node_bins[@]}" || lock "$node"
if ! entry_complete "$node" "${node_bins[@]}"; then
  k8s=(kubelet kube-controller-manager kube-scheduler)
  est=(60 480)
  if [ "$need_envtest" = 2 ]; then
    k8s=("${envtest_bins[@]}" "${k8s[@]}")
    est=(90 1080)
  fi
  echo "node: building ${k8s[*]}, containerd, runc, CNI plugins and pause from source into $node"
  echo "node: once per machine and user; every clone reuses them (cold: about $(progress_fmt $((est[0] + est[1]))) on 2 idle cores)"
  etmp="$envtest.tmp.$$" ntmp="$node.tmp.$$"
  rm -rf "$etmp" "$ntmp"
  trap 'rm -rf "$etmp" "$ntmp"' EXIT
  progress_plan node "${est[@]}"
  progress_step 1 "downloading the Kubernetes modules" k8s_download "$([ "$need_envtest" = 2 ] && echo etcd)"
  progress_step 2 "compiling ${k8s[*]} (one go build) beside containerd, runc, CNI and pause" \
    build_all "$etmp" "$ntmp" "${k8s[@]}"
  [ "$need_envtest" = 2 ] && publish "$etmp" "$envtest"
  publish "$ntmp" "$node"
  trap - EXIT
elif [ "$need_envtest" = 2 ]; then
  # It takes the lock itself.
  if [ -n "$envtest_lock" ]; then exec {envtest_lock}>&-; fi
  "$root/hack/build-envtest.sh"
fi
link_entry "$envtest" "$root/bin/k8s"
link_entry "$node" "$root/bin/node"
echo "node: bin/node -> $node"
"$root/bin/node/runc" --version | sed -n 1,3p
"$root/bin/node/containerd" --version
