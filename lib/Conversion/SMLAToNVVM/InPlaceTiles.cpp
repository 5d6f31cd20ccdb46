//===- InPlaceTiles.cpp - softmax and dscores results over their inputs ---===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

using namespace mlir;
using namespace mlir::smla;

llvm::DenseMap<Value, Value> mlir::smla::inPlaceTiles(func::FuncOp func) {
  llvm::DenseMap<Value, Value> out;
  auto alias = [&](Operation *op, Value in, Value result) {
    if (!in.getDefiningOp<memref::AllocaOp>() ||
        !result.getDefiningOp<memref::AllocaOp>() ||
        in.getType() != result.getType())
      return;
    Block *block = op->getBlock();
    for (Operation *user : in.getUsers()) {
      auto dot = dyn_cast<TileDotOp>(user);
      if (user != op && !(dot && dot.getResult() == in &&
                          dot->getBlock() == block && dot->isBeforeInBlock(op)))
        return;
    }
    for (Operation *user : result.getUsers())
      if (user != op &&
          (user->getBlock() != block || !op->isBeforeInBlock(user)))
        return;
    out[result] = in;
  };
  func.walk([&](Operation *op) {
    if (auto softmax = dyn_cast<SoftmaxOp>(op))
      alias(op, softmax.getScores(), softmax.getProbs());
    else if (auto dscores = dyn_cast<DScoresOp>(op))
      alias(op, dscores.getDp(), dscores.getDs());
  });
  return out;
}
