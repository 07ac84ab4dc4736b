#!/usr/bin/env bash
# Extracts Debian packages under bin/debs/<package> without installing them:
# `apt-get download` + `dpkg -x`, as distroless images are built from .debs.
# A package already extracted is kept; its version is in <package>/VERSION.
# Usage: hack/debs.sh PACKAGE...
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="${DEBS_DIR:-$root/bin/debs}"
mkdir -p "$out"

download() { # package, into directory
  (cd "$2" && apt-get download "$1" >/dev/null 2>&1) && return 0
  # A fresh machine may have no package lists yet.
  apt-get update >/dev/null
  (cd "$2" && apt-get download "$1" >/dev/null)
}

for pkg in "$@"; do
  [ -f "$out/$pkg/VERSION" ] && continue
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  download "$pkg" "$tmp"
  deb=$(ls "$tmp"/*.deb)
  rm -rf "$out/$pkg.tmp" && mkdir -p "$out/$pkg.tmp"
  dpkg -x "$deb" "$out/$pkg.tmp"
  dpkg-deb -f "$deb" Version >"$out/$pkg.tmp/VERSION"
  rm -rf "$out/$pkg" && mv "$out/$pkg.tmp" "$out/$pkg"
  rm -rf "$tmp"
  trap - EXIT
  echo "  $pkg $(cat "$out/$pkg/VERSION") -> $out/$pkg"
done
