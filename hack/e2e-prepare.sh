#!/usr/bin/env bash
# Builds what a run on the real node needs, before the sandbox (inside it
# there is only loopback): the envtest and node binaries, and the images of
# the operator, the test fixture and the Pod sandbox. hack/e2e.sh (make
# test-e2e) and hack/bench-podruntime.sh run it first.
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
stage "envtest binaries" hack/build-envtest.sh
stage "node binaries" hack/build-node.sh
stage "images" bash -c 'hack/image.sh manager ghcr.io/mcpbridge/operator:dev &&
  hack/image.sh mcp-fixture mcpbridge.dev/e2e/mcp-fixture:dev &&
  hack/image.sh pause "registry.k8s.io/pause:$(cat bin/node/pause.version)"'
