#!/usr/bin/env bash
# Profiles one launch of a library's kernel at a benchmark shape with
# Nsight Compute (`ncu --set full`) and writes its details page and its
# SASS source view (gzipped CSV, the input of bench/ncu_phases.py).
# Needs the torch extension built, as bench/compare_libs.py.
#
#   bash bench/ncu-profile.sh KERNEL_DIR SHAPE KERNEL_REGEX OUT_PREFIX
#   bash bench/ncu-profile.sh build/kernels B1 'h64_g1_b64_s2_base2.*_bwd' out/ncu-B1
#   -> out/ncu-B1-details.txt, out/ncu-B1-sass.csv.gz
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/ncu-profile.sh KERNEL_DIR SHAPE KERNEL_REGEX OUT_PREFIX"
kdir=$(realpath "${1:?$usage}")
shape=${2:?$usage}
regex=${3:?$usage}
out=${4:?$usage}
mkdir -p "$(dirname "$out")"
rep=$(mktemp -d)/profile
PYTHONPATH=$PWD/python SMLA_KERNEL_DIR=$kdir ncu --set full -k "regex:$regex" -c 1 -o "$rep" \
  python3 bench/bench_bwd.py --shapes "$shape" --backends compiled --no-compile \
  --iters 1 --warmup 0 --rotate 1 > "$out-run.log" 2>&1
ncu -i "$rep.ncu-rep" --page details > "$out-details.txt"
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass | gzip -c > "$out-sass.csv.gz"
rm -rf "$(dirname "$rep")"
