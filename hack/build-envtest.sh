#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, kubectl, etcd) from the Go
# module proxy at the versions pinned in hack/envtest (setup-envtest's
# download bucket is unreachable here), into the machine's cache of built
# binaries, and points bin/k8s at it (hack/lib/bincache.sh). Once one clone
# has built them, every clone of the same user reuses them in a second.
# hack/build-node.sh builds these together with the node's binaries when
# both are missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/bincache.sh
. "$root/hack/lib/bincache.sh"
# shellcheck source=lib/k8s.sh
. "$root/hack/lib/k8s.sh"
# shellcheck source=lib/progress.sh
. "$root/hack/lib/progress.sh"

cache=$(cache_root)
entry=$(envtest_entry)
if ! entry_complete "$entry" "${envtest_bins[@]}"; then
  lock "$entry"
fi
if ! entry_complete "$entry" "${envtest_bins[@]}"; then
  echo "envtest: building ${envtest_bins[*]} from source into $entry"
  echo "envtest: once per machine and user; every clone reuses them (cold: about 9 min on 2 idle cores)"
  tmp="$entry.tmp.$$"
  rm -rf "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  progress_plan envtest 90 450
  progress_step 1 "downloading the Kubernetes and etcd modules" k8s_download etcd
  progress_step 2 "compiling kube-apiserver and kubectl (one go build) and etcd" \
    k8s_build "$tmp" "${envtest_bins[@]}"
  publish "$tmp" "$entry"
  trap - EXIT
fi
link_entry "$entry" "$root/bin/k8s"
echo "envtest: bin/k8s -> $entry"
"$root/bin/k8s/etcd" --version | sed -n 1p
"$root/bin/k8s/kubectl" version --client 2>/dev/null | sed -n 1p
