#!/usr/bin/env bash
# Builds the real single-node cluster of `make test-e2e` into bin/node, from
# source at pinned versions (no prebuilt binary can be downloaded here):
#   kubelet, kube-controller-manager, kube-scheduler  (hack/envtest's module)
#   containerd, ctr, containerd-shim-runc-v2            (CGO_ENABLED=0)
#   runc with seccomp                                   (cgo, static libseccomp from Debian's libseccomp-dev)
#   CNI bridge, host-local, loopback
#   pause                                               (gcc -static of kubernetes' build/pause/linux/pause.c)
# kube-apiserver, etcd and kubectl come from bin/k8s (hack/build-envtest.sh).
# A binary that is already present is not rebuilt; nothing is installed
# outside bin/. Facts and workarounds: docs/design.md, "How it is tested".
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="${NODE_BIN_DIR:-$root/bin/node}"
debs="${DEBS_DIR:-$root/bin/debs}"
mkdir -p "$out/cni"

containerd_version=v2.4.2
runc_version=v1.5.3
cni_version=v1.10.0
pause_version=3.10.2 # the sandbox image containerd $containerd_version pins

ENVTEST_BIN_DIR="$out" "$root/hack/build-envtest.sh" kubelet kube-controller-manager kube-scheduler

# go_install DIR NAME PACKAGE@VERSION [go flags...]: builds PACKAGE at its
# own pinned go.mod (go install ...@version) into DIR/NAME.
go_install() {
  local dir=$1 name=$2 pkg=$3
  shift 3
  [ -x "$dir/$name" ] && return 0
  echo "  go install $pkg -> $dir/$name"
  local gobin
  gobin=$(mktemp -d)
  GOBIN="$gobin" go install -trimpath "$@" "$pkg"
  mv "$gobin/$(basename "${pkg%@*}")" "$dir/$name"
  rm -rf "$gobin"
}

containerd_ldflags="-X github.com/containerd/containerd/v2/version.Version=$containerd_version"
for cmd in containerd ctr containerd-shim-runc-v2; do
  CGO_ENABLED=0 go_install "$out" "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd@$containerd_version" \
    -tags "no_btrfs urfave_cli_no_docs" -ldflags "$containerd_ldflags"
done

# kubelet always asks for the RuntimeDefault seccomp profile, so runc needs
# libseccomp; it is linked statically from the extracted Debian package. The
# default libpathrs tag is left out: it needs a Rust toolchain.
# The package's paths go in CGO_CFLAGS/CGO_LDFLAGS, not in the .pc file: Go's
# build cache keys a cgo package on those variables but not on pkg-config's
# answer, so a path in the .pc file let a cached build from another checkout
# link against a folder that no longer exists.
if [ ! -x "$out/runc" ]; then
  "$root/hack/debs.sh" libseccomp-dev
  seccomp="$debs/libseccomp-dev/usr"
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
    go_install "$out" runc "github.com/opencontainers/runc@$runc_version" \
    -buildmode=pie -tags "seccomp urfave_cli_no_docs"
fi

for plugin in main/bridge ipam/host-local main/loopback; do
  CGO_ENABLED=0 go_install "$out/cni" "$(basename "$plugin")" \
    "github.com/containernetworking/plugins/plugins/$plugin@$cni_version"
done

if [ ! -x "$out/pause" ]; then
  src=$(cd "$root/hack/envtest" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  echo "  gcc -static $src -> $out/pause"
  gcc -Os -static -DVERSION="$pause_version" -o "$out/pause.tmp" "$src"
  mv "$out/pause.tmp" "$out/pause"
fi
echo "$pause_version" >"$out/pause.version"

"$out/runc" --version | sed -n 1,3p
"$out/containerd" --version
