# shellcheck shell=bash
# Sourced by hack/build-envtest.sh and hack/build-node.sh: the machine-level
# cache of the binaries they build from source, shared by every clone of the
# user (see docs/development.md, "Where the built binaries live").
#
# An entry is a directory named for a hash of everything that decides its
# content: the pinned versions, the Go version and GOOS/GOARCH, the build
# scripts and the pinned go.mod/go.sum files. It is built under a temporary
# name and renamed when complete, so an entry that exists is whole, and a
# changed input names another entry: a stale binary is never reused.
# bin/k8s and bin/node of a clone are symlinks to their entries.

# cache_root prints the cache directory: $MCPBRIDGE_CACHE_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/mcp-bridge, else (no writable home)
# bin/cache of the clone.
cache_root() {
  local dir=${MCPBRIDGE_CACHE_DIR:-}
  if [ -z "$dir" ] && [ -n "${XDG_CACHE_HOME:-}${HOME:-}" ]; then
    dir="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-bridge"
  fi
  if [ -z "$dir" ] || ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
    dir="$root/bin/cache"
    mkdir -p "$dir"
  fi
  (cd "$dir" && pwd)
}

# cache_key FILE... -- STRING...: a short hash of the files' contents, the
# strings, and the Go toolchain that compiles them.
cache_key() {
  local files=() f
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  {
    for f in "${files[@]}"; do printf '%s\n' "${f#"$root"/}"; cat "$f"; done
    printf '%s\n' "$@"
    go env GOVERSION GOOS GOARCH GOAMD64 GOEXPERIMENT GOFLAGS CC
  } | sha256sum | cut -c1-16
}

# link_entry ENTRY LINK: points LINK (bin/k8s, bin/node) at ENTRY, replacing
# a directory of an older layout or a symlink to elsewhere, never writing
# through a symlink.
link_entry() {
  mkdir -p "$(dirname "$2")"
  if [ -d "$2" ] && [ ! -L "$2" ]; then rm -rf "$2"; fi
  ln -sfn "$1" "$2"
}

# entry_complete ENTRY BIN...: whether ENTRY holds every BIN.
entry_complete() {
  local e=$1 b
  shift
  for b in "$@"; do [ -e "$e/$b" ] || return 1; done
}

# lock ENTRY: holds ENTRY's lock until the script exits (or closes
# $lock_fd), so that two clones that need the same entry at once build it
# once.
lock() {
  lock_fd=
  command -v flock >/dev/null || return 0
  exec {lock_fd}>"$1.lock"
  flock "$lock_fd"
}

# publish TMP ENTRY: makes a complete build visible under its entry's name.
publish() {
  rm -rf "$2"
  mv "$1" "$2"
}
