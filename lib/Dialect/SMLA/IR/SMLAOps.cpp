//===- SMLAOps.cpp - smla op verifiers ------------------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Every verifier says which operand is wrong, what it expected and what it
// got; the lit suite (test/Dialect/SMLA/IR/invalid.mlir) pins each message.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::smla;

#define GET_OP_CLASSES
#include "smla/Dialect/SMLA/IR/SMLAOps.cpp.inc"

namespace {
/// Checks shapes of one operand against expected static sizes; an expected
/// size of ShapedType::kDynamic accepts anything (a run-time size).
class ShapeChecker {
public:
  explicit ShapeChecker(Operation *op) : op(op) {}

  LogicalResult dims(StringRef name, Value value, ArrayRef<int64_t> expected) {
    auto type = cast<ShapedType>(value.getType());
    for (auto [i, want] : llvm::enumerate(expected)) {
      if (ShapedType::isDynamic(want))
        continue;
      int64_t got = type.getDimSize(i);
      if (got != want)
        return op->emitOpError()
               << "operand '" << name << "' dimension " << i << " must be "
               << want << ", got "
               << (ShapedType::isDynamic(got) ? std::string("?")
                                              : std::to_string(got))
               << " (type " << type << ")";
    }
    return success();
  }

  /// Run-time sizes that several operands share (T, S_kv) must agree when
  /// they are static.
  LogicalResult same(StringRef what,
                     ArrayRef<std::pair<StringRef, int64_t>> sizes) {
    std::optional<std::pair<StringRef, int64_t>> first;
    for (auto [name, size] : sizes) {
      if (ShapedType::isDynamic(size))
        continue;
      if (!first) {
        first = {name, size};
        continue;
      }
      if (size != first->second)
        return op->emitOpError()
               << what << " differs between '" << first->first << "' ("
               << first->second << ") and '" << name << "' (" << size << ")";
    }
    return success();
  }

private:
  Operation *op;
};

int64_t dim(Value v, unsigned i) {
  return cast<ShapedType>(v.getType()).getDimSize(i);
}
constexpr int64_t kDyn = ShapedType::kDynamic;
} // namespace

//===----------------------------------------------------------------------===//
// SparseAttentionBwdOp
//===----------------------------------------------------------------------===//

LogicalResult SparseAttentionBwdOp::verify() {
  ConfigAttr cfg = getConfig();
  int64_t h = cfg.getHeads(), g = cfg.getGroups(), d = cfg.getD();
  int64_t w = cfg.getQkWidth();
  ShapeChecker check(*this);
  if (failed(check.dims("q", getQ(), {kDyn, h, w})) ||
      failed(check.dims("kv", getKv(), {kDyn, g, w})) ||
      failed(check.dims("o", getO(), {kDyn, h, d})) ||
      failed(check.dims("dout", getDout(), {kDyn, h, d})) ||
      failed(check.dims("indices", getIndices(), {kDyn, g, kDyn})) ||
      failed(check.dims("lse", getLse(), {kDyn, h})) ||
      failed(check.dims("dq", getDq(), {kDyn, h, w})) ||
      failed(check.dims("dkv_accum", getDkvAccum(), {kDyn, g, w})))
    return failure();

  Type dqElem = getDq().getType().getElementType();
  if (dqElem != cfg.getDqType())
    return emitOpError() << "operand 'dq' element type must be the config's "
                            "dqType "
                         << cfg.getDqType() << ", got " << dqElem;
  bool wantDkv = cfg.getDkvType().isBF16();
  if (wantDkv != static_cast<bool>(getDkv()))
    return emitOpError() << "operand 'dkv' must be "
                         << (wantDkv ? "present" : "absent")
                         << " when the config's dkvType is "
                         << cfg.getDkvType();
  if (getDkv() && failed(check.dims("dkv", getDkv(), {kDyn, g, w})))
    return failure();
  if (cfg.getPositions() != static_cast<bool>(getPositions()))
    return emitOpError() << "operand 'positions' must be "
                         << (cfg.getPositions() ? "present" : "absent")
                         << " when the config says positions = "
                         << (cfg.getPositions() ? "true" : "false");
  if (getCounters() &&
      failed(check.dims("counters", getCounters(), {kNumCounters})))
    return failure();
  if (getDelta() && failed(check.dims("delta", getDelta(), {kDyn, h})))
    return failure();

  // indices and positions are per token; the rest holds `tokens` tokens
  // per row (ConfigAttr): compare in rows.
  int64_t n = cfg.getTokens();
  auto rows = [&](StringRef name, Value v) -> FailureOr<int64_t> {
    int64_t size = dim(v, 0);
    if (ShapedType::isDynamic(size))
      return size;
    if (size % n != 0)
      return emitOpError() << "operand '" << name << "' has " << size
                           << " tokens, not a multiple of the config's "
                              "tokens ("
                           << n << ")";
    return size / n;
  };
  FailureOr<int64_t> indexRows = rows("indices", getIndices());
  if (failed(indexRows))
    return failure();
  SmallVector<std::pair<StringRef, int64_t>> tokens = {
      {"q", dim(getQ(), 0)},       {"o", dim(getO(), 0)},
      {"dout", dim(getDout(), 0)}, {"indices", *indexRows},
      {"lse", dim(getLse(), 0)},   {"dq", dim(getDq(), 0)}};
  if (getDelta())
    tokens.push_back({"delta", dim(getDelta(), 0)});
  if (Value lengths = getTopkLength()) {
    if (n != 1)
      return emitOpError() << "operand 'topk_length' needs a step of one "
                              "token (config tokens = 1), got tokens = "
                           << n;
    tokens.push_back({"topk_length", dim(lengths, 0)});
  }
  if (getPositions()) {
    FailureOr<int64_t> positionRows = rows("positions", getPositions());
    if (failed(positionRows))
      return failure();
    tokens.push_back({"positions", *positionRows});
  }
  SmallVector<std::pair<StringRef, int64_t>> keys = {
      {"kv", dim(getKv(), 0)}, {"dkv_accum", dim(getDkvAccum(), 0)}};
  if (getDkv())
    keys.push_back({"dkv", dim(getDkv(), 0)});
  if (failed(check.same("token count (dim 0)", tokens)) ||
      failed(check.same("key count (dim 0)", keys)))
    return failure();

  float scale = getSmScale().convertToFloat();
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return emitOpError() << "sm_scale must be finite and > 0, got " << scale;
  return success();
}

//===----------------------------------------------------------------------===//
// Tile ops
//===----------------------------------------------------------------------===//

/// Hg must divide the head count of a [T, H, *] operand.
static LogicalResult checkHeadsPerGroup(Operation *op, StringRef name,
                                        Value rows, int64_t hg) {
  int64_t h = dim(rows, 1);
  if (ShapedType::isDynamic(h) || ShapedType::isDynamic(hg) || hg < 1 ||
      h % hg != 0)
    return op->emitOpError() << "heads of '" << name << "' (" << h
                             << ") must be a static multiple of the tile's "
                                "heads per group ("
                             << hg << ")";
  return success();
}

/// Lengths of two vectors (or a vector and a tile dimension) must agree.
static LogicalResult checkLength(Operation *op, StringRef a, int64_t la,
                                 StringRef b, int64_t lb) {
  if (la != lb || ShapedType::isDynamic(la))
    return op->emitOpError() << "length of '" << a << "' (" << la
                             << ") must equal " << b << " (" << lb << ")";
  return success();
}

/// The lanes of an optional vector operand `v` (named `a`), when present.
static LogicalResult checkLanes(Operation *op, StringRef a, Value v,
                                StringRef b, int64_t lb) {
  if (!v)
    return success();
  return checkLength(op, a, cast<VectorType>(v.getType()).getNumElements(), b,
                     lb);
}

/// `what` reads `width` columns of a tile that has `tileWidth`.
static LogicalResult checkWithinTile(Operation *op, StringRef what,
                                     int64_t width, int64_t tileWidth) {
  if (width > tileWidth)
    return op->emitOpError() << what << " (" << width
                             << ") exceeds the tile width (" << tileWidth
                             << ")";
  return success();
}

LogicalResult DeltaOp::verify() {
  if (getO().getType() != getDout().getType())
    return emitOpError() << "operands 'o' and 'dout' must have the same type";
  if (getGiven() && dim(getGiven(), 1) != dim(getO(), 1))
    return emitOpError() << "operand 'given' must have the heads of 'o' ("
                         << dim(getO(), 1) << "), got " << dim(getGiven(), 1);
  return checkHeadsPerGroup(*this, "o", getO(), dim(getDelta(), 0));
}

LogicalResult IndexMaskOp::verify() {
  return checkLength(*this, "mask", getMask().getType().getNumElements(),
                     "the number of indices",
                     getIndices().getType().getNumElements());
}

LogicalResult IndexPairOp::verify() {
  return checkLength(*this, "mask", getFirstMask().getType().getNumElements(),
                     "the number of indices",
                     getFirst().getType().getNumElements());
}

LogicalResult PairUnionOp::verify() {
  if (dim(getIndices(), 1) != 1 || dim(getRows(), 1) != 1)
    return emitOpError() << "indices and rows must be [T, 1, K] (one kv "
                            "group)";
  int64_t n = dim(getKeys(), 0);
  if (ShapedType::isDynamic(n) || n < 2 || !llvm::isPowerOf2_64(n) ||
      dim(getPositions(), 0) != n)
    return emitOpError() << "keys and positions must have the same static "
                            "power-of-two length";
  if (ShapedType::isDynamic(dim(getRanks(), 0)) ||
      ShapedType::isDynamic(dim(getPartials(), 0)))
    return emitOpError() << "ranks and partials must have static lengths";
  return success();
}

LogicalResult GatherOp::verify() {
  int64_t lanes = getIndices().getType().getNumElements();
  if (failed(checkLength(*this, "tile rows", dim(getTile(), 0),
                         "the number of indices", lanes)))
    return failure();
  if (failed(checkLanes(*this, "mask", getMask(), "the number of indices",
                        lanes)))
    return failure();
  if (getIssueOnly() && getWaitOnly())
    return emitOpError() << "cannot be both issue_only and wait_only";
  if (dim(getTile(), 1) < dim(getKv(), 2))
    return emitOpError() << "tile width (" << dim(getTile(), 1)
                         << ") is less than the kv row width ("
                         << dim(getKv(), 2) << ")";
  return success();
}

LogicalResult TileDotOp::verify() {
  if (failed(checkHeadsPerGroup(*this, "lhs", getLhs(), dim(getResult(), 0))))
    return failure();
  if (failed(checkLength(*this, "result columns", dim(getResult(), 1),
                         "tile rows", dim(getTile(), 0))))
    return failure();
  return checkWithinTile(*this, "contraction width", dim(getLhs(), 2),
                         dim(getTile(), 1));
}

LogicalResult SoftmaxOp::verify() {
  if (getScores().getType() != getProbs().getType())
    return emitOpError() << "operands 'scores' and 'probs' must have the same "
                            "type";
  int64_t hg = dim(getScores(), 0), b = dim(getScores(), 1);
  if (failed(checkHeadsPerGroup(*this, "lse", getLse(), hg)))
    return failure();
  if (failed(checkLanes(*this, "mask", getMask(), "the block size", b)))
    return failure();
  if (failed(checkLanes(*this, "live", getLive(), "the heads per group", hg)))
    return failure();
  if (Value pair = getPairMask()) {
    if (!getMask())
      return emitOpError() << "has a 'pair_mask' but no 'mask'";
    if (failed(checkLength(*this, "pair_mask",
                           cast<VectorType>(pair.getType()).getNumElements(),
                           "the block size", b)))
      return failure();
    if (hg % 2)
      return emitOpError() << "with a 'pair_mask' needs an even number of "
                              "rows, got "
                           << hg;
  }
  if (auto clamp = getClamp()) {
    double c = clamp->convertToDouble();
    if (!(c >= 0.0 && c <= kMaxExp2Clamp))
      return emitOpError() << "clamp must be in [0, "
                           << llvm::formatv("{0}", kMaxExp2Clamp)
                           << "] so that exp2 stays finite, got "
                           << llvm::formatv("{0}", c);
  }
  return success();
}

LogicalResult DScoresOp::verify() {
  if (getProbs().getType() != getDp().getType() ||
      getProbs().getType() != getDs().getType())
    return emitOpError() << "operands 'probs', 'dp' and 'ds' must have the "
                            "same type";
  return checkLength(*this, "delta", dim(getDelta(), 0), "the heads per group",
                     dim(getProbs(), 0));
}

LogicalResult DqAccumulateOp::verify() {
  if (failed(checkLength(*this, "ds columns", dim(getDs(), 1), "tile rows",
                         dim(getTile(), 0))) ||
      failed(checkLength(*this, "acc rows", dim(getAcc(), 0), "ds rows",
                         dim(getDs(), 0))))
    return failure();
  return checkWithinTile(*this, "acc width", dim(getAcc(), 1),
                         dim(getTile(), 1));
}

LogicalResult DqPackedOp::verify() {
  if (dim(getPacked(), 0) != 2)
    return emitOpError() << "packed must hold two products (dS and P)";
  if (failed(checkLength(*this, "packed slots", dim(getPacked(), 1),
                         "tile rows", dim(getTile(), 0))) ||
      failed(checkLength(*this, "acc rows", dim(getAcc(), 0), "packed rows",
                         dim(getPacked(), 2))))
    return failure();
  return checkWithinTile(*this, "acc width", dim(getAcc(), 1),
                         dim(getTile(), 1));
}

/// The dkv rows a scatter reduces into are as wide as q; do is [T, H, D]
/// with D <= that width.
static LogicalResult checkScatterWidths(Operation *op, Value dkv, Value q,
                                        Value dout) {
  if (dim(dkv, 2) != dim(q, 2))
    return op->emitOpError() << "dkv width (" << dim(dkv, 2)
                             << ") must equal the q width (" << dim(q, 2)
                             << ")";
  if (dim(dout, 2) > dim(q, 2) || dim(dout, 1) != dim(q, 1))
    return op->emitOpError() << "dout must be [T, H, D] with D <= the q width";
  return success();
}

LogicalResult ScatterDkvOp::verify() {
  if (getDs().getType() != getProbs().getType())
    return emitOpError() << "operands 'ds' and 'probs' must have the same type";
  int64_t hg = dim(getDs(), 0);
  int64_t lanes = getIndices().getType().getNumElements();
  if (failed(checkHeadsPerGroup(*this, "q", getQ(), hg)) ||
      failed(checkLength(*this, "ds columns", dim(getDs(), 1),
                         "the number of indices", lanes)))
    return failure();
  if (failed(checkLanes(*this, "mask", getMask(), "the number of indices",
                        lanes)))
    return failure();
  if (failed(checkScatterWidths(*this, getDkv(), getQ(), getDout())))
    return failure();
  return success();
}

LogicalResult PackDkvOp::verify() {
  if (getDs().getType() != getProbs().getType())
    return emitOpError() << "operands 'ds' and 'probs' must have the same type";
  int64_t hg = dim(getDs(), 0), block = dim(getDs(), 1);
  int64_t lanes = getIndices().getType().getNumElements();
  if (failed(checkLength(*this, "ds columns", block, "the number of indices",
                         lanes)) ||
      failed(checkLanes(*this, "mask", getMask(), "the number of indices",
                        lanes)) ||
      failed(checkLength(*this, "slots", dim(getSlots(), 0),
                         "the number of indices", lanes)))
    return failure();
  if (dim(getPacked(), 0) != 2 || dim(getPacked(), 1) != block ||
      dim(getPacked(), 2) != hg)
    return emitOpError() << "packed must be [2, " << block << ", " << hg
                         << "] (dS and P, slots x rows)";
  if (!getCluster().empty() && getCluster().size() != 3)
    return emitOpError() << "cluster takes the partner tiles, the "
                            "mbarriers and the count";
  return success();
}

LogicalResult ClusterInitOp::verify() {
  auto type = getBars().getType();
  if (!type.hasStaticShape() || type.getDimSize(0) < 1 ||
      !gpu::GPUDialect::isWorkgroupMemoryAddressSpace(type.getMemorySpace()))
    return emitOpError() << "bars must be a static, non-empty array in "
                            "workgroup memory";
  return success();
}

LogicalResult ScatterPackedOp::verify() {
  int64_t hg = dim(getPacked(), 2), block = dim(getPacked(), 1);
  if (dim(getPacked(), 0) != 2)
    return emitOpError() << "packed must hold two products (dS and P)";
  if (failed(checkHeadsPerGroup(*this, "q", getQ(), hg)) ||
      failed(checkLength(*this, "slots", dim(getSlots(), 0),
                         "the packed slots", block)))
    return failure();
  if (failed(checkScatterWidths(*this, getDkv(), getQ(), getDout())))
    return failure();
  int64_t chunks = getChunks(), chunk = getChunk();
  if (chunks < 1 || chunk < 0 || chunk >= chunks ||
      ShapedType::isDynamic(dim(getQ(), 2)) || dim(getQ(), 2) % chunks)
    return emitOpError() << "chunk " << chunk << " of " << chunks
                         << " must split the q width (" << dim(getQ(), 2)
                         << ") into equal parts";
  if (!getCluster().empty() && getCluster().size() != 4)
    return emitOpError() << "cluster takes the partner rows, the partner "
                            "tiles, the mbarriers and the count";
  return success();
}

/// A tile op's `counters`, when present, holds every counter slot.
static LogicalResult checkCounters(Operation *op, Value counters) {
  if (!counters)
    return success();
  int64_t n = cast<MemRefType>(counters.getType()).getDimSize(0);
  if (ShapedType::isDynamic(n) || n == kNumCounters)
    return success();
  return op->emitOpError() << "operand 'counters' must have " << kNumCounters
                           << " elements, got " << n;
}

LogicalResult StoreDqOp::verify() {
  if (failed(checkHeadsPerGroup(*this, "dq", getDq(), dim(getAcc(), 0))))
    return failure();
  if (dim(getAcc(), 1) != dim(getDq(), 2))
    return emitOpError() << "acc width (" << dim(getAcc(), 1)
                         << ") must equal the dq width (" << dim(getDq(), 2)
                         << ")";
  return checkCounters(*this, getCounters());
}

LogicalResult CastDkvOp::verify() {
  if (!getDkv() && !getCounters())
    return emitOpError() << "needs 'dkv' to round into, 'counters' to count "
                            "into, or both";
  if (Value dkv = getDkv()) {
    auto src = getAccum().getType(), dst = cast<MemRefType>(dkv.getType());
    for (unsigned i = 1; i < 3; ++i)
      if (src.getDimSize(i) != dst.getDimSize(i))
        return emitOpError() << "accum and dkv must have the same shape, got "
                             << src << " and " << dst;
  }
  return checkCounters(*this, getCounters());
}
