#!/usr/bin/env bash
# Regenerates docs/generated/ (dialect, transformation and conversion pass
# reference) from the .td files. `scripts/gen-docs.sh --check` fails if the
# committed copies are stale; the test command runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SMLA_BUILD_DIR:-build}
ninja -C "$BUILD" mlir-doc >/dev/null
mkdir -p docs/generated
for f in SMLADialect SMLAGPUDialect SMLAPasses SMLAConversionPasses; do
  if [ "${1:-}" = "--check" ]; then
    if ! diff -u "docs/generated/$f.md" "$BUILD/docs/$f.md"; then
      echo "docs/generated/$f.md is stale: run scripts/gen-docs.sh" >&2
      exit 1
    fi
  else
    cp "$BUILD/docs/$f.md" "docs/generated/$f.md"
  fi
done
