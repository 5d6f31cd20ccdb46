//===- CtaEmitter.cpp - helpers for CTA-cooperative code -------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

#include "llvm/Support/CommandLine.h"

using namespace mlir;
using namespace mlir::smla;

namespace {
/// For measurements only (docs/performance.md, "What bounds B1 and B2":
/// the bounds that stop the targets rest on libraries built this way). The
/// kernels it builds compute a wrong dkv.
enum class DiagnosticDkv { None, NoReductions, NoScatter };
llvm::cl::opt<DiagnosticDkv> diagnosticDkv(
    "smla-diagnostic-dkv",
    llvm::cl::desc("Measurement only, wrong dkv: build the dKV reductions "
                   "switched off"),
    llvm::cl::init(DiagnosticDkv::None),
    llvm::cl::values(
        clEnumValN(DiagnosticDkv::None, "none", "the real kernels"),
        clEnumValN(DiagnosticDkv::NoReductions, "no-reductions",
                   "predicated off at run time (%clock never equals "
                   "0x7fffffff, which neither LLVM nor ptxas can fold): "
                   "the dKV products stay, no reduction is issued"),
        clEnumValN(DiagnosticDkv::NoScatter, "no-scatter",
                   "predicated off by a constant that ptxas folds: the "
                   "dKV products go with the reductions")));

/// `valid` and the diagnostic's false, if one is asked for.
Value diagnosticPredicate(OpBuilder &b, Location loc, Value valid) {
  if (diagnosticDkv == DiagnosticDkv::None)
    return valid;
  bool clock = diagnosticDkv == DiagnosticDkv::NoReductions;
  auto read = LLVM::InlineAsmOp::create(
      b, loc, TypeRange{b.getI32Type()}, ValueRange{},
      clock ? "mov.u32 $0, %clock;" : "mov.u32 $0, 0;", "=r",
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
  Value never = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, read.getResult(0),
      arith::ConstantOp::create(b, loc,
                                b.getI32IntegerAttr(clock ? 0x7fffffff : 1)));
  return arith::AndIOp::create(b, loc, valid, never);
}
} // namespace

Value mlir::smla::emitReduce(
    OpBuilder &b, Location loc, Value lb, Value ub, Value step, Value init,
    function_ref<Value(OpBuilder &, Value, Value)> fn) {
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, step, ValueRange{init},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange args) {
        scf::YieldOp::create(nb, l, fn(nb, iv, args[0]));
      });
  return loop.getResult(0);
}

Value mlir::smla::i32c(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}

std::pair<Value, Value> mlir::smla::splitQuad(OpBuilder &b, Location loc,
                                              Value q, int64_t width) {
  auto [row, quad] = splitRow(b, loc, q, width / 4);
  Value four = arith::ConstantIndexOp::create(b, loc, 4);
  return {row, arith::MulIOp::create(b, loc, quad, four)};
}

std::pair<Value, Value> mlir::smla::splitRow(OpBuilder &b, Location loc,
                                             Value q, int64_t n) {
  Value nv = arith::ConstantIndexOp::create(b, loc, n);
  return {arith::DivUIOp::create(b, loc, q, nv),
          arith::RemUIOp::create(b, loc, q, nv)};
}

Value mlir::smla::loadVecF32(OpBuilder &b, Location loc, Value memref,
                             ValueRange indices, int64_t n) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  // Every caller loads at a last index that is a multiple of n from rows
  // whose width is a multiple of 16 elements (d, dt % 16): the access is
  // naturally aligned, which lets it become one ld.v4/ld.v2 (without the
  // attribute the LLVM lowering assumes element alignment and splits it).
  int64_t bytes = n * llvm::divideCeil(elem.getIntOrFloatBitWidth(), 8);
  Value v = vector::LoadOp::create(b, loc, VectorType::get({n}, elem), memref,
                                   indices, /*nontemporal=*/false,
                                   llvm::Align(std::min<int64_t>(bytes, 16)));
  if (elem.isF32())
    return v;
  return arith::ExtFOp::create(b, loc, VectorType::get({n}, b.getF32Type()), v);
}

Value mlir::smla::headIndex(OpBuilder &b, Location loc, Value block, int64_t hb,
                            Value h) {
  Value base = arith::MulIOp::create(
      b, loc, block, arith::ConstantIndexOp::create(b, loc, hb));
  return arith::AddIOp::create(b, loc, base, h);
}

/// `if (cond() && counters != null) counters[slot] += amount()` (atomic).
static void addToCounter(OpBuilder &b, Location loc, Value counters,
                         int64_t slot, function_ref<Value()> cond,
                         function_ref<Value(OpBuilder &, Location)> amount) {
  Value ptr = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, counters);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value present =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, ptr, zero);
  Value fire = arith::AndIOp::create(b, loc, cond(), present);
  scf::IfOp::create(b, loc, fire, [&](OpBuilder &nb, Location l) {
    Value n = amount(nb, l);
    Value at = arith::ConstantIndexOp::create(nb, l, slot);
    memref::AtomicRMWOp::create(nb, l, arith::AtomicRMWKind::addi, n,
                                counters, ValueRange{at});
    scf::YieldOp::create(nb, l);
  });
}

void mlir::smla::emitCount(OpBuilder &b, Location loc, Value counters,
                           int64_t slot, Value cond) {
  if (!counters)
    return;
  addToCounter(
      b, loc, counters, slot, [&] { return cond; },
      [](OpBuilder &nb, Location l) -> Value {
        return arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(1));
      });
}

void mlir::smla::emitCounts(OpBuilder &b, Location loc, Value counters,
                            int64_t slot, ValueRange conds) {
  if (!counters || conds.empty())
    return;
  Value n = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
  for (Value c : conds)
    n = arith::AddIOp::create(
        b, loc, n, arith::ExtUIOp::create(b, loc, b.getI32Type(), c));
  addToCounter(
      b, loc, counters, slot,
      [&]() -> Value {
        return arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::ne, n,
            arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
      },
      [&](OpBuilder &nb, Location l) -> Value {
        return arith::ExtUIOp::create(nb, l, nb.getI64Type(), n);
      });
}

void mlir::smla::emitProxyFence(OpBuilder &b, Location loc) {
  LLVM::InlineAsmOp::create(
      b, loc, TypeRange{}, ValueRange{}, "fence.proxy.async.shared::cta;", "",
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

void mlir::smla::emitMaskedRed(OpBuilder &b, Location loc, Value dkv,
                               Value group, Value valid, Value raw, Value col,
                               ValueRange values, Value policy) {
  assert((values.size() == 2 || values.size() == 4) && "red.v2 or red.v4");
  auto dkvType = cast<MemRefType>(dkv.getType());
  int64_t groups = dkvType.getDimSize(1), width = dkvType.getDimSize(2);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, dkv);
  Value zero32 = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
  Value row = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      arith::SelectOp::create(b, loc, valid, raw, zero32));
  auto cst = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  Value elem = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(
          b, loc,
          arith::AddIOp::create(b, loc,
                                arith::MulIOp::create(b, loc, row, cst(groups)),
                                group),
          cst(width)),
      col);
  Value addr = arith::AddIOp::create(
      b, loc, base, arith::MulIOp::create(b, loc, elem, cst(4)));
  Value addr64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
  auto genericPtr = LLVM::LLVMPointerType::get(b.getContext());
  auto globalPtr = LLVM::LLVMPointerType::get(b.getContext(), 1);
  Value p = LLVM::IntToPtrOp::create(b, loc, genericPtr, addr64);
  p = LLVM::AddrSpaceCastOp::create(b, loc, globalPtr, p);
  SmallVector<Value> operands{p};
  operands.append(values.begin(), values.end());
  operands.push_back(diagnosticPredicate(b, loc, valid));
  bool v4 = values.size() == 4;
  std::string text = v4 ? "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};"
                        : "@$3 red.global.add.v2.f32 [$0], {$1, $2};";
  std::string constraints = v4 ? "l,f,f,f,f,b" : "l,f,f,b";
  if (policy) {
    operands.push_back(policy);
    text = v4 ? "@$5 red.global.add.L2::cache_hint.v4.f32 [$0], {$1, $2, "
                "$3, $4}, $6;"
              : "@$3 red.global.add.L2::cache_hint.v2.f32 [$0], {$1, $2}, $4;";
    constraints += ",l";
  }
  LLVM::InlineAsmOp::create(
      b, loc, TypeRange{}, operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

Value mlir::smla::emitEvictLastPolicy(OpBuilder &b, Location loc) {
  auto op = LLVM::InlineAsmOp::create(
      b, loc, b.getI64Type(), ValueRange{},
      "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;", "=l",
      /*has_side_effects=*/false, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
  return op.getResult(0);
}
