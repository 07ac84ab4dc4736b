#!/usr/bin/env bash
# Benchmarks the Pod runtime on the real node of make test-e2e
# (hack/bench/podruntime): builds what the node needs (hack/e2e-prepare.sh),
# the fixture and the benchmark, then runs it inside hack/e2e-sandbox.sh,
# which leaves the machine as it was. Root, Linux. Arguments go to the
# benchmark (-h lists them); its table goes to stdout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
hack/e2e-prepare.sh >&2
go build -o bin/mcp-fixture ./test/fixture/cmd/mcp-fixture
go build -o bin/bench-podruntime ./hack/bench/podruntime
hack/e2e-sandbox.sh bin/bench-podruntime -fixture="$root/bin/mcp-fixture" "$@"
