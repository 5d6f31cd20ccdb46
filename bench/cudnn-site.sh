#!/usr/bin/env bash
# Packs cuDNN frontend's sparse-attention backward (bench/cudnn_peer.py) and
# what it imports for a GPU machine without network:
#   bash bench/cudnn-site.sh OUTDIR [PART_MB]
# Downloads the CPython 3.12 manylinux wheels of nvidia-cudnn-frontend
# 1.32.0, the CUTLASS DSL 4.8.1 (base, core, cu13 libraries) and
# apache-tvm-ffi 0.1.12 from PyPI (network, no GPU), unpacks them into one
# folder and writes it as OUTDIR/cudnn-site.tar.xz.partNN, parts of at most
# PART_MB MB (default 40: about 73 MB in all, so two parts that each fit one
# transfer to the GPU machine). There, with every part in one folder:
#   bash bench/cudnn-site.sh --unpack PARTS_DIR /tmp/cudnn-site
#   export PYTHONPATH=/tmp/cudnn-site:/tmp/cudnn-site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
# (the CUTLASS DSL wheel finds its packages through a .pth file, which
# PYTHONPATH does not read, hence its second entry).
set -euo pipefail
if [ "${1:-}" = "--unpack" ]; then
  parts=${2:?usage: bench/cudnn-site.sh --unpack PARTS_DIR DEST}
  dest=${3:?usage: bench/cudnn-site.sh --unpack PARTS_DIR DEST}
  mkdir -p "$dest"
  cat "$parts"/cudnn-site.tar.xz.part* | xz -d | tar -x -C "$dest"
  exit 0
fi
out=$(realpath -m "${1:?usage: bench/cudnn-site.sh OUTDIR [PART_MB]}")
part_mb=${2:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
for req in nvidia-cudnn-frontend==1.32.0 nvidia-cutlass-dsl==4.8.1 \
           nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 \
           nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi==0.1.12; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$work/wheels" "$req"
done
# A wheel is a zip of its install tree; unzipping works whatever this
# machine's Python version is (pip install --target would refuse cp312).
mkdir -p "$work/site" "$out"
for w in "$work"/wheels/*.whl; do
  unzip -q -o "$w" -d "$work/site"
done
rm -f "$out"/cudnn-site.tar.xz.part*
tar -C "$work/site" -cf - . | xz -6 -T2 | split -b "${part_mb}M" -d - "$out/cudnn-site.tar.xz.part"
ls -l "$out"/cudnn-site.tar.xz.part*
