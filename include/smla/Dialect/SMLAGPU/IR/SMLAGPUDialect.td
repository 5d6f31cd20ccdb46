//===- SMLAGPUDialect.td - smla_gpu dialect definition -----*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLAGPU_IR_SMLAGPUDIALECT_TD
#define SMLA_DIALECT_SMLAGPU_IR_SMLAGPUDIALECT_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/OpBase.td"

def SMLAGPU_Dialect : Dialect {
  let name = "smla_gpu";
  let cppNamespace = "::mlir::smla_gpu";
  let summary = "The GPU schedule of the sparse-MLA backward on sm_90a";
  let description = [{
    `smla_gpu` states how one CTA of a bwd kernel runs on a Hopper SM: which
    warpgroup plays which role, the pipelines that hand key tiles and
    probability tiles from one role to the next (stages and their
    mbarriers), the masked asynchronous gathers that fill a stage, the
    warpgroup matrix products (wgmma, with the A operand in registers or in
    shared memory), the guarded softmax on accumulator fragments (plain
    `arith` / `math` on vectors, so the clamp and the select that make P
    exactly 0 stay visible) and the masked dKV reduction.

    `smla-schedule-warp-specialized` builds this IR from the guarded tile
    loop nest of a gpu.func (`smla-gpu-map`); `smla-gpu-to-nvvm` lowers
    each op with one rewrite pattern to the NVVM dialect: upstream ops for
    the mbarriers (init, arrive, the cp.async arrival), setmaxnreg, named
    barriers and `stmatrix`; inline PTX for the wgmma instructions (fence,
    `mma_async` with either A operand, commit, wait), the mbarrier spin
    wait without a suspend hint, `fence.proxy.async` and
    `red.global.add.v4.f32` with an L2 cache hint.

    Shared-memory tiles are workgroup `memref`s (placed by
    `smla-allocate-smem`, checked by `smla-verify-smem`) whose bytes the
    ops of this dialect read and write in one layout, the 128-byte swizzle
    of wgmma: a bf16 tile of R rows and C columns is C / 64 slabs of
    R x 128 bytes; element (r, c) lies in slab c / 64, row r at 128 r, its
    16-byte chunk (c % 64) / 8 at 16 (((c % 64) / 8) xor (r % 8)).
  }];
  let useDefaultTypePrinterParser = 1;
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::vector::VectorDialect"
  ];
}

class SMLAGPU_Op<string mnemonic, list<Trait> traits = []>
    : Op<SMLAGPU_Dialect, mnemonic, traits>;

class SMLAGPU_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<SMLAGPU_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def SMLAGPU_PipelineType : SMLAGPU_Type<"Pipeline", "pipeline"> {
  let summary = "A ring of stages handed from a producer role to consumers";
  let description = [{
    `stages` buffers in shared memory, each guarded by two mbarriers:
    `full` (the producer's writes of the stage have landed: `producers`
    arrivals) and `empty` (every consumer is done with it: `consumers`
    arrivals). Use `i` of the ring is stage `i % stages` in phase
    `(i / stages) % 2`.
  }];
  let parameters = (ins "int64_t":$stages, "int64_t":$producers,
                        "int64_t":$consumers);
  let assemblyFormat = [{
    `<` `stages` `=` $stages `,` `producers` `=` $producers `,`
    `consumers` `=` $consumers `>`
  }];
  let genVerifyDecl = 1;
}

#endif // SMLA_DIALECT_SMLAGPU_IR_SMLAGPUDIALECT_TD
