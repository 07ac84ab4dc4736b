#!/usr/bin/env bash
# Runs the API suite verbosely and prints one line per spec, so that `make
# test` shows every manifest the real kube-apiserver refused or accepted.
# On failure it prints the whole log.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
go test "$@" -v ./test/api/ -ginkgo.v -ginkgo.no-color >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	cat "$log"
	exit $rc
fi
echo "API suite on a real kube-apiserver (each line is one spec):"
grep -E '^(Invalid McpServer manifests|Valid McpServer manifests|config/samples|Printer columns|Admission)' "$log" | sed 's/^/  /'
grep -E '^(Ran [0-9]+ of|SUCCESS!|ok )' "$log"
