#!/usr/bin/env bash
# Packs TileLang and its dependencies for an offline GPU machine, for the
# TileLang peer of the harness (docs/performance.md, "Peers"):
#   bash bench/tilelang-site.sh OUT.tar.xz [TILELANG_VERSION]
# Downloads the manylinux wheels for CPython 3.12 from PyPI (this machine
# needs network, not a GPU), installs them with --no-deps into tlsite/ and
# packs that folder (~41 MB for 0.1.15). On the GPU machine:
#   tar -xJf OUT.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/tlsite
# TileLang's kernel itself (examples/deepseek_v32/sparse_mla_bwd.py of
# tile-ai/tilelang) is not fetched: bench/tilelang_peer.py says where it goes.
set -euo pipefail
out=$(realpath -m "${1:?usage: bench/tilelang-site.sh OUT.tar.xz [TILELANG_VERSION]}")
version=${2:-0.1.15}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64; do
  platforms+=(--platform "$p")
done
# tilelang 0.1.15's requirements (its wheel's metadata; another version may
# pin others), less what the GPU machine's PyTorch environment has (torch,
# numpy, typing-extensions).
for req in "tilelang==$version" "apache-tvm-ffi<0.1.13,>=0.1.11" "z3-solver<4.15.5,>=4.13.0" \
           torch-c-dlpack-ext ml-dtypes cloudpickle tqdm psutil; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    "${platforms[@]}" -d "$work/wheels" "$req"
done
python3 -m pip install --quiet --no-deps --no-index --target "$work/tlsite" \
  --python-version 3.12 --only-binary=:all: "${platforms[@]}" "$work"/wheels/*.whl
rm -rf "$work/tlsite/bin"
tar -C "$work" -cf - tlsite | xz -9 -T2 > "$out"
ls -l "$out"
