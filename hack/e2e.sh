#!/usr/bin/env bash
# make test-e2e: builds the real node, the images and the suite, then runs
# the suite (test/e2e) inside hack/e2e-sandbox.sh. Everything that needs the
# network is built first: inside the sandbox there is only loopback.
# Extra arguments go to the test binary (e.g. -ginkgo.focus=...).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
hack/e2e-prepare.sh

stage() { # name, command...
  local start=$SECONDS
  "${@:2}"
  echo "e2e: $1 took $((SECONDS - start)) s"
}
stage "suite build" go test -c -o bin/e2e.test ./test/e2e
# The chart's installer (the Helm SDK), from the chart tests' own module.
stage "chart installer build" bash -c 'cd test/chart && go build -o ../../bin/chart-release ./cmd/chart-release'
stage "suite" hack/e2e-sandbox.sh bin/e2e.test -test.v -test.timeout=30m "$@"
