#!/usr/bin/env bash
# Builds one image of hack/image (manager, mcp-fixture, pause) as an OCI
# tarball under bin/images, without a Docker engine.
# Usage: hack/image.sh NAME TAG
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -eq 2 ] || { echo "usage: hack/image.sh NAME TAG" >&2; exit 2; }

hack/debs.sh ca-certificates tini
(cd hack/image && go build -o "$root/bin/image-builder" .)
revision=$(git rev-parse HEAD 2>/dev/null || true)
bin/image-builder -image "$1" -tag "$2" -o "bin/images/$1.tar" -revision "$revision"
