#!/bin/bash
# Builds a variant of the kernel library: the library's own smla-compile
# command line (ninja -C build -t commands smla-kernels), its --config
# arguments passed through an optional sed expression, into OUTDIR, with
# the smla-compile of build/ as it is now (e.g. patched, or with an
# experiment's environment). Extra arguments go to smla-compile.
#
#   bash bench/variant-lib.sh OUTDIR [SED-EXPR] [smla-compile args...]
#   bash bench/variant-lib.sh /tmp/lib 's/overlap_chunks=2/overlap_chunks=1/g'
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/variant-lib.sh OUTDIR [SED-EXPR] [smla-compile args...]}
expr=${2:-}
args=$(ninja -C build -t commands smla-kernels | grep 'bin/smla-compile -o' |
  sed "s#.*bin/smla-compile -o $PWD/build/kernels##")
[ -n "$args" ] || { echo "no smla-compile command for smla-kernels in build/" >&2; exit 1; }
[ -n "$expr" ] && args=$(echo "$args" | sed "$expr")
rm -rf "$out"
# shellcheck disable=SC2086  (the configuration arguments split on spaces)
build/bin/smla-compile -o "$out" "${@:3}" $args
