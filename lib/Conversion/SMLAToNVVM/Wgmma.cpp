//===- Wgmma.cpp - warpgroup MMA helpers of the lowerings -----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla::wgmma {

LLVM::InlineAsmOp inlineAsm(OpBuilder &b, Location loc, Type result,
                            ValueRange operands, StringRef text,
                            StringRef constraints) {
  return LLVM::InlineAsmOp::create(
      b, loc, result ? TypeRange{result} : TypeRange{}, operands, text,
      constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

void statement(OpBuilder &b, Location loc, StringRef text) {
  inlineAsm(b, loc, Type(), ValueRange{}, text, "");
}
void fence(OpBuilder &b, Location loc) {
  statement(b, loc, "wgmma.fence.sync.aligned;");
}
void commit(OpBuilder &b, Location loc) {
  statement(b, loc, "wgmma.commit_group.sync.aligned;");
}
void wait(OpBuilder &b, Location loc, int64_t pending) {
  statement(b, loc,
            "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";");
}

Value descriptor(Mma &m, Value addr, int64_t lbo, int64_t sbo,
                 bool swizzle128) {
  OpBuilder &b = m.b;
  Location loc = m.loc;
  Value a = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
  auto i64 = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  Value start = arith::ShRUIOp::create(
      b, loc, arith::AndIOp::create(b, loc, a, i64(0x3FFFF)), i64(4));
  // Bits 62-63, the layout: 1 is the 128-byte swizzle.
  int64_t fields = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) |
                   (swizzle128 ? int64_t(1) << 62 : 0);
  return arith::OrIOp::create(b, loc, start, i64(fields));
}

Value advance(Mma &m, Value desc, int64_t bytes) {
  if (!bytes)
    return desc;
  return arith::AddIOp::create(
      m.b, m.loc, desc,
      arith::ConstantOp::create(m.b, m.loc, m.b.getI64IntegerAttr(bytes / 16)));
}

Value launder(Mma &m, Value v) {
  OpBuilder &b = m.b;
  Location loc = m.loc;
  Value x = arith::IndexCastOp::create(b, loc, b.getI64Type(), v);
  auto op = inlineAsm(b, loc, b.getI64Type(), ValueRange{x}, "mov.b64 $0, $1;",
                      "=l,l");
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), op.getResult(0));
}

SmallVector<Value> mmaAsync(Mma &m, int64_t n, ValueRange aRegs, Value descA,
                            Value descB, bool transB, ValueRange d,
                            bool transA) {
  OpBuilder &b = m.b;
  Location loc = m.loc;
  int64_t regs = n / 2;
  bool accumulate = !d.empty();
  std::string outs, ties, constraints;
  for (int64_t i = 0; i < regs; ++i) {
    outs += (i ? ",$" : "$") + std::to_string(i);
    ties += "," + std::to_string(i);
    constraints += "=f,";
  }
  int64_t next = regs;
  auto arg = [&]() { return "$" + std::to_string(next++); };
  SmallVector<Value> operands;
  std::string a;
  if (!aRegs.empty()) {
    assert(aRegs.size() == 4 && "an m64k16 A fragment is 4 registers a warp");
    a = "{";
    for (int64_t i = 0; i < 4; ++i) {
      a += (i ? ", " : "") + arg();
      constraints += "r,";
    }
    a += "}";
    operands.append(aRegs.begin(), aRegs.end());
  } else {
    a = arg();
    constraints += "l,";
    operands.push_back(descA);
  }
  std::string bDesc = arg();
  constraints += "l";
  operands.push_back(descB);
  // Register A takes no transpose flag of its own.
  std::string flags =
      aRegs.empty() ? std::string(transA ? "1, " : "0, ") + (transB ? "1" : "0")
                    : (transB ? "1" : "0");
  std::string text = std::string("{\n.reg .pred p;\nsetp.ne.b32 p, ") +
                     (accumulate ? "1" : "0") +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + "k16.f32.bf16.bf16 {" + outs + "}, " +
                     a + ", " + bDesc + ", p, 1, 1, " + flags + ";\n}";
  if (accumulate) {
    constraints += ties;
    operands.append(d.begin(), d.end());
  }
  Type f32 = b.getF32Type();
  auto resTy = LLVM::LLVMStructType::getLiteral(b.getContext(),
                                                SmallVector<Type>(regs, f32));
  auto op = inlineAsm(b, loc, resTy, operands, text, constraints);
  SmallVector<Value> out;
  for (int64_t i = 0; i < regs; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, op.getResult(0), i));
  return out;
}

} // namespace mlir::smla::wgmma
