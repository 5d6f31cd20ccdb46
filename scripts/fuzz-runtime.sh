#!/usr/bin/env bash
# Fuzzes every parser the runtime has (runtime/test/fuzz/ManifestFuzz.cpp:
# the JSON and manifest readers, grid rules) with libFuzzer under ASan and
# UBSan for SECONDS (default 60), from the seeds in runtime/test/fuzz/corpus
# (inputs up to 16 KiB: small inputs keep it at thousands of runs a
# second; the readers' size limits are tested in ctest). Needs clang with
# libFuzzer (Debian's clang package). A crash leaves its input in
# build-fuzz/crash-* and fails the script.
#   bash scripts/fuzz-runtime.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
BUILD=build-fuzz
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S runtime -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DSMLA_RUNTIME_FUZZ=ON \
    -DSMLA_RUNTIME_BUILD_TESTS=OFF -DSMLA_RUNTIME_BUILD_TOOLS=OFF >/dev/null
fi
ninja -C "$BUILD" smla_manifest_fuzz
corpus="$BUILD/corpus"
mkdir -p "$corpus"
cp runtime/test/fuzz/corpus/* "$corpus/"
cd "$BUILD"
./smla_manifest_fuzz -seed=1 -max_total_time="$SECONDS_TO_RUN" -max_len=16384 \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict=../runtime/test/fuzz/manifest.dict corpus
