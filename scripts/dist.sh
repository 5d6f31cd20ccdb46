#!/usr/bin/env bash
# Builds smla's distribution from this checkout, on a CPU machine with
# LLVM/MLIR 22 (scripts/install-deps.sh): the kernel library
# (build/kernels, `ninja -C build smla-kernels`), then in OUT (default dist/)
#   smla-<version>.tar.gz            the source distribution: the Python
#                                    package, the extension's C++ sources
#                                    and the kernel library
#   smla-<version>-py3-none-any.whl  the wheel, built from it with pip
# Installing either needs torch, a C++ compiler, CMake and the CUDA headers
# (the extension builds against the installed torch on first use), not
# LLVM, a GPU or the network: `pip install smla-<version>-py3-none-any.whl`.
#   bash scripts/dist.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
BUILD=${SMLA_BUILD_DIR:-build}
bash scripts/build.sh smla-kernels
VERSION=$(python3 -c 'exec(open("python/smla/_version.py").read()); print(__version__)')
rm -f "$OUT/smla-$VERSION.tar.gz" "$OUT/smla-$VERSION-py3-none-any.whl"
KERNELS=$(cd "$BUILD/kernels" && pwd) python3 - "$OUT" <<'PY'
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("smla_backend", "python/backend/smla_backend.py")
backend = importlib.util.module_from_spec(spec)
spec.loader.exec_module(backend)
print(backend.build_sdist(sys.argv[1], {"kernels": os.environ["KERNELS"]}))
PY
# The wheel from the source distribution, as pip builds it on any machine:
# in an isolated environment, from the index of nothing (the backend needs
# no package).
python3 -m pip wheel -q --no-deps --no-index -w "$OUT" "$OUT/smla-$VERSION.tar.gz"
ls -l "$OUT/smla-$VERSION.tar.gz" "$OUT/smla-$VERSION-py3-none-any.whl"
