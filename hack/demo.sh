#!/usr/bin/env bash
# `make demo` arrives with the reconciler; until then it says so.
echo "make demo is not available yet: it needs the McpServer reconciler (see the open issues)."
echo "Run 'make test' to see the API on a real control plane."
exit 1
