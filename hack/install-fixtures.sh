#!/usr/bin/env bash
# Installs the MCP servers that tests run as upstreams:
#   - test/node/node_modules: the pinned Node servers (server-everything,
#     server-filesystem), installed from test/node/package-lock.json with
#     `npm ci`, only when missing or older than the lock file;
#   - bin/mcp-fixture: the Go fixture server (go build is cheap when cached).
# Run from anywhere; idempotent.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_dir="$root/test/node"
lock="$node_dir/package-lock.json"
modules="$node_dir/node_modules"

# npm ci deletes node_modules and installs exactly the lock file. Its own
# marker, node_modules/.package-lock.json, is rewritten on every install,
# so comparing it with the lock file tells whether the install is stale.
if [[ ! -f "$modules/.package-lock.json" || "$lock" -nt "$modules/.package-lock.json" ]]; then
	echo "install-fixtures: npm ci in test/node" >&2
	(cd "$node_dir" && npm ci --no-audit --no-fund)
else
	echo "install-fixtures: test/node/node_modules is up to date" >&2
fi

echo "install-fixtures: building bin/mcp-fixture" >&2
(cd "$root" && go build -o bin/mcp-fixture ./test/fixture/cmd/mcp-fixture)
