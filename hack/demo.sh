#!/usr/bin/env bash
# make demo: builds the demo driver (hack/demo) and hands over to it with
# exec, so that Ctrl-C reaches it directly; it builds everything else itself
# and stops whatever it started. Flags are passed on, e.g.
# hack/demo.sh --exit-after-recovery (or DEMO_EXIT_AFTER_RECOVERY=1).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
go build -o bin/demo ./hack/demo
exec bin/demo "$@"
