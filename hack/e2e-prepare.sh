#!/usr/bin/env bash
# Builds what a run on the real node needs, before the sandbox (inside it
# there is only loopback): the envtest and node binaries (from the machine's
# cache when another clone built them), and the images of the operator, the
# test fixture and the Pod sandbox. hack/e2e.sh (make test-e2e) and
# hack/bench-podruntime.sh run it first.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Stop at once where the node cannot run, before a long build.
hack/e2e-sandbox.sh --preflight

stage() { # name, command...
  local start=$SECONDS
  "${@:2}"
  echo "e2e: $1 took $((SECONDS - start)) s"
}
mkdir -p bin
# The Debian packages of both lanes first: on a fresh machine their download
# runs apt-get update, which two at once would fight over.
hack/debs.sh ca-certificates tini libseccomp-dev
# The operator's and the fixture's images need nothing of the node: they
# build beside it, and the pause image (bin/node/pause) after it.
stage "manager and fixture images (beside the node)" \
  hack/image.sh manager ghcr.io/mcpbridge/operator:dev mcp-fixture mcpbridge.dev/e2e/mcp-fixture:dev \
  >bin/e2e-images.log 2>&1 &
images=$!
rc=0
stage "envtest and node binaries" hack/build-node.sh || rc=$?
wait "$images" || { rc=$?; cat bin/e2e-images.log >&2; }
tail -n 1 bin/e2e-images.log
[ "$rc" -eq 0 ] || exit "$rc"
stage "pause image" hack/image.sh pause "registry.k8s.io/pause:$(cat bin/node/pause.version)"
