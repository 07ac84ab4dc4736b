#!/usr/bin/env bash
# Runs COMMAND where the real node of `make test-e2e` may start without
# changing the machine (see docs/design.md, "How it is tested"):
#
#  - its own mount, network and PID namespaces (unshare): every process of
#    the run dies with the namespace's init, also on SIGKILL; the Pod network
#    and the node's address exist only in the namespace, which has nothing
#    but loopback to start with;
#  - /etc, /opt, /run, /tmp, /usr and /var are overlays whose writes go to a
#    tmpfs that vanishes with the namespace: kubelet, containerd and CNI write
#    to fixed paths whatever their configuration says (a run writes
#    /opt/containerd, /run/containerd/s, /run/nri, /var/lib/cni/results,
#    /var/lib/kubelet/device-plugins and /var/log/containers);
#  - files holding kubelet's desired values are bind-mounted over the sysctls
#    kubelet writes at start, so the host's values never move;
#  - the node's cgroups live under one cgroup named mcpbridge-e2e in every
#    hierarchy, removed after the run and, after a crashed run, at the start
#    of the next.
#
# Usage: hack/e2e-sandbox.sh COMMAND [ARG...]   (root, Linux, cgroup v1)
#        hack/e2e-sandbox.sh --preflight         (only check those)
# Inside, MCPBRIDGE_E2E_STATE is an empty tmpfs for the node's state and
# MCPBRIDGE_E2E_NODE_IP the node's address. The components' logs go to
# bin/e2e-logs, which outlives the run unless the checkout itself lies under
# one of the overlaid directories.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
self="$root/hack/e2e-sandbox.sh"
cgroup_name=mcpbridge-e2e
node_ip=10.200.0.1
# What kubelet writes at start (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables), with the values it wants.
sysctls=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)
overlays=(/etc /opt /run /tmp /usr /var)

fail() {
  echo "make test-e2e: $*" >&2
  exit 1
}

preflight() {
  [ "$(uname -s)" = Linux ] ||
    fail "needs Linux (this is $(uname -s)): it runs a real kubelet, containerd and runc."
  [ "$(id -u)" = 0 ] ||
    fail "needs root (uid 0, this is uid $(id -u)): kubelet, containerd and runc create namespaces, mounts and cgroups. Run it as root on a machine or CI runner of its own."
  local t
  for t in unshare mount umount ip flock; do
    command -v "$t" >/dev/null || fail "needs $t (util-linux, iproute2) on PATH."
  done
  [ -f /sys/fs/cgroup/memory/cgroup.procs ] ||
    fail "needs cgroup v1 controllers under /sys/fs/cgroup (as on this project's machines); a cgroup v2-only host is not supported yet."
}

# hierarchies lists the mounted cgroup hierarchies: the v1 controllers and,
# on a hybrid host, the cgroup2 one, where runc mirrors the Pods' cgroups.
hierarchies() {
  awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts
}

make_cgroups() {
  local h
  for h in $(hierarchies); do
    mkdir -p "$h/$cgroup_name"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h/$cgroup_name/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$cgroup_name/cpuset.mems"
    fi
  done
}

# remove_cgroups removes the run's cgroups, leaves first. Their processes
# died with the namespace; an exiting process can keep its cgroup busy for
# a moment, so it retries for up to 10 s.
remove_cgroups() {
  local h i left
  for i in $(seq 100); do
    left=""
    for h in $(hierarchies); do
      [ -d "$h/$cgroup_name" ] || continue
      find "$h/$cgroup_name" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$h/$cgroup_name" ] && left+=" $h/$cgroup_name"
    done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "make test-e2e: could not remove the cgroups$left (processes still in them: $(cat $(find $left -name cgroup.procs) | tr '\n' ' '))" >&2
  return 1
}

outside() {
  preflight
  # One node per machine at a time: cgroup names are global. The lock is
  # held until every process of the run, inside the namespace too, is gone.
  exec 9</sys/fs/cgroup
  flock -n 9 || fail "another make test-e2e runs on this machine; wait for it to end."
  "$root/hack/debs.sh" tini
  mkdir -p "$root/bin/e2e-sandbox"
  rm -rf "$root/bin/e2e-logs" # the components' logs of the last run only
  remove_cgroups # of a crashed run
  make_cgroups
  local rc=0
  # --kill-child: when unshare dies, even by SIGKILL, the namespace's init
  # is killed and with it every process of the namespace. tini is that init:
  # it reaps the orphans (containerd shims) that reparent to it.
  unshare --mount --net --pid --fork --kill-child --mount-proc --propagation private \
    "$root/bin/debs/tini/usr/bin/tini-static" -s -g -- "$self" --inside "$@" || rc=$?
  remove_cgroups || rc=1
  return $rc
}

overlay() { # directory, folder for its upper layer
  mkdir -p "$2/upper" "$2/work"
  mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1"
}

inside() {
  local sb="$root/bin/e2e-sandbox" d kv f
  # The overlays' upper layers live on a tmpfs of their own at $sb. The
  # directory that holds the checkout, if any, is overlaid last: its overlay
  # hides $sb, where the others' upper layers must still be reachable.
  mount -t tmpfs -o mode=0755 mcpbridge-e2e-overlays "$sb"
  local last=""
  for d in "${overlays[@]}"; do
    [ -d "$d" ] || continue
    case "$root/" in "$d"/*) last=$d && continue ;; esac
    overlay "$d" "$sb/${d#/}"
  done
  [ -z "$last" ] || overlay "$last" "$sb/${last#/}"
  # The node's state on a tmpfs mounted after the overlays, so that it is
  # what $sb shows even where the checkout lies under an overlaid directory
  # (containerd's overlayfs snapshots cannot live on an overlay).
  mount -t tmpfs -o mode=0755 mcpbridge-e2e-state "$sb"
  mkdir -p "$sb/sysctl" "$sb/state"
  for kv in "${sysctls[@]}"; do
    f="$sb/sysctl/${kv%%=*}"
    mkdir -p "$(dirname "$f")"
    echo "${kv#*=}" >"$f"
    mount --bind "$f" "/proc/sys/${kv%%=*}"
  done
  ip link set lo up
  ip addr add "$node_ip/32" dev lo
  export MCPBRIDGE_E2E_STATE="$sb/state" MCPBRIDGE_E2E_NODE_IP="$node_ip"
  export MCPBRIDGE_E2E_SYSCTLS="${sysctls[*]}"
  exec "$@"
}

if [ "${1:-}" = --inside ]; then
  shift
  inside "$@"
elif [ "${1:-}" = --preflight ]; then
  preflight
else
  [ $# -gt 0 ] || fail "usage: hack/e2e-sandbox.sh COMMAND [ARG...]"
  outside "$@"
fi
