#!/usr/bin/env bash
# Builds images of hack/image (manager, mcp-fixture, pause) as OCI tarballs
# under bin/images, without a Docker engine; several at once when given
# several NAME TAG pairs (the builder is compiled once).
# Usage: hack/image.sh NAME TAG [NAME TAG...]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -ge 2 ] && [ $(($# % 2)) -eq 0 ] || { echo "usage: hack/image.sh NAME TAG [NAME TAG...]" >&2; exit 2; }

hack/debs.sh ca-certificates tini
(cd hack/image && go build -o "$root/bin/image-builder" .)
revision=$(git rev-parse HEAD 2>/dev/null || true)
pids=()
while [ $# -gt 0 ]; do
  bin/image-builder -image "$1" -tag "$2" -o "bin/images/$1.tar" -revision "$revision" &
  pids+=($!)
  shift 2
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit "$rc"
