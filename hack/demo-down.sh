#!/usr/bin/env bash
# make demo-down: stops a demo that is still running elsewhere or was killed,
# using the pid files it keeps in .demo/, then removes .demo/. A pid counts
# only while it still runs the program its file is named after, so a reused
# pid is never signalled.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${DEMO_DIR:-$root/.demo}"

# running NAME PID: PID is alive (not a zombie) and its argv[0] ends in NAME.
running() {
	local argv0
	argv0="$(tr '\0' '\n' 2>/dev/null <"/proc/$2/cmdline" | sed -n 1p)" || return 1
	[[ "$(basename -- "${argv0:-/}")" == "$1" ]]
}

# stop NAME GRACE: SIGTERM, then SIGKILL after GRACE seconds.
stop() {
	local file="$dir/$1.pid" pid i
	[[ -f "$file" ]] || return 0
	pid="$(<"$file")"
	if running "$1" "$pid"; then
		echo "demo-down: stopping $1 (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < $2 * 10; i++)); do
			running "$1" "$pid" || break
			sleep 0.1
		done
		if running "$1" "$pid"; then
			echo "demo-down: $1 (pid $pid) ignored SIGTERM for $2s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$file"
}

if [[ ! -d "$dir" ]]; then
	echo "demo-down: no demo state in $dir"
	exit 0
fi
# A live demo stops everything itself, in order; what a killed one left
# behind goes next, the manager first so that it disposes its MCP servers.
stop demo 90
stop manager 40
stop mcp-fixture 5
stop kube-apiserver 20
stop etcd 20
rm -rf "$dir"
echo "demo-down: removed $dir"
