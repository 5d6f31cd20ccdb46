"""Build and call the CPU lowering of smla.sparse_attention_bwd.

This drives the real compiler: a small MLIR function holding one
`smla.sparse_attention_bwd` goes through `smla-opt --smla-cpu` (decompose,
guards, guard verifier, loops, LLVM dialect), `mlir-translate`, `llc` and the
system C compiler into a shared object, which is called through ctypes with
MLIR's C memref descriptors. Inputs and outputs are torch CPU tensors.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
LLVM_BIN = Path(os.environ.get("SMLA_LLVM_BIN", "/usr/lib/llvm-22/bin"))


def smla_opt() -> Path:
    """The smla-opt binary: $SMLA_OPT, else build/bin/smla-opt."""
    path = Path(os.environ.get("SMLA_OPT", REPO / "build" / "bin" / "smla-opt"))
    if not path.exists():
        raise FileNotFoundError(f"smla-opt not found at {path}; build the project or set SMLA_OPT")
    return path


@dataclass(frozen=True)
class Config:
    d: int
    dt: int
    heads: int
    groups: int
    block: int
    lse_base: int  # 2 or 0 for natural
    positions: bool
    dq_type: str  # "bf16" | "f32"
    dkv_type: str  # "bf16" | "f32"
    head_blocks: int = 1  # blocks the heads of one group are split into
    tokens: int = 1  # folded tokens per step (heads counts all their rows)

    @property
    def width(self) -> int:
        return self.d + self.dt


def _memref(shape, elem: str) -> str:
    return "memref<" + "x".join(str(s) for s in shape) + "x" + elem + ">"


def render(cfg: Config, scale: float) -> str:
    """The MLIR function for one configuration (dynamic T, S_kv and top-k)."""
    h, g, w, d = cfg.heads, cfg.groups, cfg.width, cfg.d
    args = [
        ("q", _memref(["?", h, w], "bf16")),
        ("kv", _memref(["?", g, w], "bf16")),
        ("o", _memref(["?", h, d], "bf16")),
        ("dout", _memref(["?", h, d], "bf16")),
        ("indices", _memref(["?", g, "?"], "i32")),
        ("lse", _memref(["?", h], "f32")),
    ]
    if cfg.positions:
        args.append(("positions", _memref(["?"], "i32")))
    args.append(("dq", _memref(["?", h, w], cfg.dq_type)))
    args.append(("dkv_accum", _memref(["?", g, w], "f32")))
    if cfg.dkv_type == "bf16":
        args.append(("dkv", _memref(["?", g, w], "bf16")))
    args.append(("counters", "memref<4xi64>"))
    sig = ", ".join(f"%{n}: {t}" for n, t in args)
    operands = " ".join(f"{n}(%{n} : {t})" for n, t in args)
    base = "base2" if cfg.lse_base == 2 else "natural"
    attr = (
        f"#smla.config<d = {cfg.d}, dt = {cfg.dt}, heads = {h}, groups = {g}, "
        f"block = {cfg.block}, lseBase = {base}, "
        f"positions = {'true' if cfg.positions else 'false'}, "
        f"dqType = {cfg.dq_type}, dkvType = {cfg.dkv_type}, "
        f"headBlocks = {cfg.head_blocks}, tokens = {cfg.tokens}>"
    )
    return (
        f"func.func @bwd({sig}) attributes {{llvm.emit_c_interface}} {{\n"
        f"  smla.sparse_attention_bwd {operands}\n"
        f"      {{config = {attr}, sm_scale = {float(scale)!r} : f32}}\n"
        f"  return\n}}\n"
    ), [n for n, _ in args]


def _run(cmd, **kw):
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stderr}")
    return res


class CpuKernel:
    """A compiled CPU kernel for one configuration and sm_scale."""

    def __init__(self, cfg: Config, scale: float, workdir: Path | None = None):
        self.cfg, self.scale = cfg, scale
        text, self.arg_names = render(cfg, scale)
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="smla-cpu-")
            workdir = Path(self._tmp.name)
        src = workdir / f"bwd_{key}.mlir"
        src.write_text(text)
        llvm_mlir, ll = src.with_suffix(".llvm.mlir"), src.with_suffix(".ll")
        obj, so = src.with_suffix(".o"), src.with_suffix(".so")
        _run([smla_opt(), "--smla-cpu", src, "-o", llvm_mlir])
        _run([LLVM_BIN / "mlir-translate", "--mlir-to-llvmir", llvm_mlir, "-o", ll])
        _run([LLVM_BIN / "llc", "-O2", "-filetype=obj", "--relocation-model=pic", ll, "-o", obj])
        cc = shutil.which("cc") or shutil.which("gcc")
        _run([cc, "-shared", obj, "-o", so, "-lm"])
        self._lib = ctypes.CDLL(str(so))
        self._fn = getattr(self._lib, "_mlir_ciface_bwd")
        self._fn.restype = None

    @staticmethod
    def _descriptor(t: torch.Tensor):
        assert t.is_contiguous()
        rank = t.dim()

        class Desc(ctypes.Structure):
            _fields_ = [
                ("allocated", ctypes.c_void_p),
                ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64),
                ("sizes", ctypes.c_int64 * rank),
                ("strides", ctypes.c_int64 * rank),
            ]

        desc = Desc()
        desc.allocated = desc.aligned = t.data_ptr()
        desc.offset = 0
        for i in range(rank):
            desc.sizes[i] = t.shape[i]
            desc.strides[i] = t.stride(i)
        return desc

    def __call__(self, q, kv, o, dout, indices, lse, positions=None):
        """Runs the compiled backward; returns (dq, dkv, counters)."""
        cfg = self.cfg
        T, S = q.shape[0], kv.shape[0]
        w = cfg.width
        dq_dtype = torch.bfloat16 if cfg.dq_type == "bf16" else torch.float32
        tensors = {
            "q": q.contiguous(), "kv": kv.contiguous(), "o": o.contiguous(),
            "dout": dout.contiguous(), "indices": indices.contiguous(),
            "lse": lse.contiguous(),
            # Poisoned outputs: every element must be written.
            "dq": torch.full((T, cfg.heads, w), float("nan"), dtype=dq_dtype),
            "dkv_accum": torch.full((S, cfg.groups, w), float("nan")),
            "counters": torch.zeros(4, dtype=torch.int64),
        }
        if cfg.positions:
            tensors["positions"] = positions.contiguous()
        if cfg.dkv_type == "bf16":
            tensors["dkv"] = torch.full((S, cfg.groups, w), float("nan"), dtype=torch.bfloat16)
        descs = [self._descriptor(tensors[n]) for n in self.arg_names]
        self._fn(*[ctypes.byref(dsc) for dsc in descs])
        dkv = tensors["dkv"] if cfg.dkv_type == "bf16" else tensors["dkv_accum"]
        return tensors["dq"], dkv, tensors["counters"]
