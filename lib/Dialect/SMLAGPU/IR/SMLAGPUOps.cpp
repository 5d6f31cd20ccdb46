//===- SMLAGPUOps.cpp - smla_gpu op verifiers -----------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::smla_gpu;

#define GET_OP_CLASSES
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOps.cpp.inc"

namespace {
bool inWorkgroupMemory(MemRefType type) {
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(type.getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup;
}

/// A shared-memory tile in the 128-byte swizzle: rows a multiple of 8
/// (the swizzle's atom), columns a multiple of 64 (one slab is 128 bytes
/// of bf16 per row).
LogicalResult verifyTile(Operation *op, MemRefType type, StringRef what) {
  if (!inWorkgroupMemory(type))
    return op->emitOpError() << "expects " << what
                             << " in workgroup (shared) memory";
  if (!type.hasStaticShape() || type.getDimSize(0) % 8 ||
      type.getDimSize(1) % kSlabColumns)
    return op->emitOpError()
           << "expects " << what
           << " with a static number of rows (a multiple of 8) and of "
              "columns (a multiple of 64), got "
           << type;
  if (!type.getLayout().isIdentity())
    return op->emitOpError() << "expects " << what
                             << " with the identity layout (the op applies "
                                "the 128-byte swizzle)";
  return success();
}

/// The fragment of an m64nN accumulator: N / 2 elements per thread, N a
/// multiple of 8 in [8, 256].
LogicalResult verifyColumns(Operation *op, int64_t n) {
  if (n < 8 || n > 256 || n % 8)
    return op->emitOpError()
           << "expects a fragment of 8 to 256 columns (a multiple of 8), "
              "got "
           << n;
  return success();
}

LogicalResult verifyFragment(Operation *op, VectorType type, int64_t n) {
  if (failed(verifyColumns(op, n)))
    return failure();
  if (type.getNumElements() != n / 2)
    return op->emitOpError() << "expects " << n / 2
                             << " elements per thread for " << n
                             << " columns, got " << type;
  return success();
}

bool inWarpSpecializeRegion(Operation *op) {
  return op->getParentOfType<WarpSpecializeOp>() != nullptr;
}
} // namespace

LogicalResult WarpSpecializeOp::verify() {
  int64_t regions = getPartitions().size();
  if (regions < 2)
    return emitOpError() << "expects at least two roles, got " << regions;
  if (static_cast<int64_t>(getRoles().size()) != regions ||
      static_cast<int64_t>(getRegisters().size()) != regions)
    return emitOpError() << "expects one role name and one register count "
                            "per region ("
                         << regions << ")";
  int64_t total = 0;
  for (int32_t r : getRegisters()) {
    if (r < 24 || r > 256 || r % 8)
      return emitOpError() << "expects register counts that setmaxnreg "
                              "takes (multiples of 8 in [24, 256]), got "
                           << r;
    total += int64_t(r) * kWarpgroupThreads;
  }
  // setmaxnreg moves registers between the warpgroups of the CTA: their
  // sum cannot exceed what the CTA was launched with (the SM's registers
  // over its threads, in steps of 8 per thread).
  int64_t threads = regions * kWarpgroupThreads;
  int64_t start = std::min<int64_t>(256, kRegistersPerSm / threads / 8 * 8);
  if (total > start * threads)
    return emitOpError() << "asks for " << total << " registers, more than "
                         << "the " << start * threads
                         << " the CTA starts with (" << start
                         << " per thread at " << threads << " threads)";
  if (auto func = (*this)->getParentOfType<gpu::GPUFuncOp>())
    if (auto block = func.getKnownBlockSize())
      if ((*block)[0] != regions * kWarpgroupThreads)
        return emitOpError() << "has " << regions
                             << " roles, so the kernel must have "
                             << regions * kWarpgroupThreads
                             << " threads, got " << (*block)[0];
  return success();
}

LogicalResult ThreadInWarpgroupOp::verify() {
  if (!inWarpSpecializeRegion(*this))
    return emitOpError() << "must be inside a smla_gpu.warp_specialize role";
  return success();
}

LogicalResult PipelineCreateOp::verify() {
  auto type = cast<PipelineType>(getPipeline().getType());
  MemRefType bars = getBarriers().getType();
  if (!inWorkgroupMemory(bars) || !bars.hasStaticShape() ||
      bars.getDimSize(0) != 2 * type.getStages())
    return emitOpError() << "expects " << 2 * type.getStages()
                         << " i64 mbarrier words in workgroup memory, got "
                         << bars;
  if (inWarpSpecializeRegion(*this))
    return emitOpError() << "must run on every thread, before the roles";
  return success();
}

LogicalResult GatherKeysOp::verify() {
  if (failed(verifyTile(*this, getTile().getType(), "a key tile")))
    return failure();
  int64_t rows = getTile().getType().getDimSize(0);
  if (getIndices().getType().getNumElements() != rows ||
      getMask().getType().getNumElements() != rows)
    return emitOpError() << "expects one index and one mask lane per tile "
                            "row ("
                         << rows << ")";
  int64_t width = getKv().getType().getDimSize(2);
  if (ShapedType::isDynamic(width) ||
      width > getTile().getType().getDimSize(1) || width % 8)
    return emitOpError() << "expects kv rows of a static width, a multiple "
                            "of 8 that fits the tile";
  return success();
}

LogicalResult WriteSlotsOp::verify() {
  int64_t lanes = getIndices().getType().getNumElements();
  if (getMasks().empty())
    return emitOpError() << "expects at least one mask: a slot is an index "
                            "only where its masks hold";
  for (Value m : getMasks())
    if (cast<VectorType>(m.getType()).getNumElements() != lanes)
      return emitOpError() << "expects masks of " << lanes << " lanes";
  MemRefType slots = getSlots().getType();
  if (!inWorkgroupMemory(slots) || slots.getDimSize(0) != lanes)
    return emitOpError() << "expects " << lanes
                         << " slots in workgroup memory";
  return success();
}

LogicalResult LoadRowsOp::verify() {
  if (failed(verifyTile(*this, getTile().getType(), "a row tile")))
    return failure();
  MemRefType src = getSource().getType();
  int64_t rows = getTile().getType().getDimSize(0);
  int64_t width = src.getDimSize(2);
  if (ShapedType::isDynamic(src.getDimSize(1)) ||
      src.getDimSize(1) < rows || ShapedType::isDynamic(width) ||
      width % 8 || width > getTile().getType().getDimSize(1))
    return emitOpError() << "expects at least " << rows
                         << " rows per token and a static width (a multiple "
                            "of 8) that fits the tile";
  return success();
}

LogicalResult WgmmaOp::verify() {
  if (static_cast<bool>(getATile()) == static_cast<bool>(getARegs()))
    return emitOpError() << "expects A as exactly one of a tile or registers";
  int64_t n = getN(), k = getKExtent();
  if (failed(verifyColumns(*this, n)))
    return failure();
  if (k < 16 || k % 16)
    return emitOpError() << "expects a k extent that is a multiple of 16, "
                            "got "
                         << k;
  auto major = [&](StringRef m) { return m == "k" || m == "mn"; };
  if (!major(getAMajor()) || !major(getBMajor()))
    return emitOpError() << "expects majors \"k\" or \"mn\"";
  if (getARegs()) {
    if (getAMajor() != "k")
      return emitOpError() << "expects a register A to be k-major";
    if (getARegs().getType().getNumElements() != 4 * (k / 16))
      return emitOpError() << "expects " << 4 * (k / 16)
                           << " A registers for a k extent of " << k;
  }
  if (getAcc() && getAcc().getType().getNumElements() != n / 2)
    return emitOpError() << "expects an accumulator of " << n / 2
                         << " elements";
  if (getResult().getType().getNumElements() != n / 2)
    return emitOpError() << "expects a result of " << n / 2 << " elements";
  // Offsets the swizzle allows: rows in whole 8-row atoms; a k-major
  // operand steps along k in 16 columns, an mn-major one starts a slab.
  auto checkTile = [&](Value tile, StringRef which, StringRef maj,
                       int64_t row, int64_t col,
                       int64_t mnExtent) -> LogicalResult {
    auto type = cast<MemRefType>(tile.getType());
    if (failed(verifyTile(*this, type, which)))
      return failure();
    int64_t rows = maj == "k" ? mnExtent : k;
    int64_t cols = maj == "k" ? k : mnExtent;
    bool aligned = row % 8 == 0 && (maj == "k" ? col % 16 == 0
                                               : col % kSlabColumns == 0);
    if (!aligned || row < 0 || col < 0 || row + rows > type.getDimSize(0) ||
        col + cols > type.getDimSize(1))
      return emitOpError()
             << "reads " << which << " out of its tile or at an offset the "
             << "128-byte swizzle does not allow (rows " << row << " + "
             << rows << ", columns " << col << " + " << cols << " of "
             << type << ")";
    return success();
  };
  if (getATile() && failed(checkTile(getATile(), "A", getAMajor(), getARow(),
                                     getACol(), kFragmentRows)))
    return failure();
  return checkTile(getBTile(), "B", getBMajor(), getBRow(), getBCol(), n);
}

LogicalResult PackOperandOp::verify() {
  int64_t n = 2 * getSource().getType().getNumElements();
  if (n % 16)
    return emitOpError() << "expects a fragment of a multiple of 16 columns";
  if (getResult().getType().getNumElements() != n / 4)
    return emitOpError() << "expects " << n / 4 << " registers for " << n
                         << " columns";
  return success();
}

/// A fragment read from a 1-D buffer of at least `need` values (one per
/// row or per column of the fragment's tile) of the fragment's element
/// type.
template <typename OpT>
static LogicalResult verifyFragmentRead(OpT op, int64_t need, StringRef per) {
  if (failed(verifyFragment(op, op.getResult().getType(), op.getN())))
    return failure();
  if (op.getValues().getType().getElementType() !=
      op.getResult().getType().getElementType())
    return op.emitOpError() << "expects the values' element type";
  int64_t len = op.getValues().getType().getDimSize(0);
  if (!ShapedType::isDynamic(len) && len < need)
    return op.emitOpError() << "expects at least " << need << " values (one per "
                            << per << ")";
  return success();
}

LogicalResult FragmentRowsOp::verify() {
  return verifyFragmentRead(*this, kFragmentRows, "row");
}

LogicalResult FragmentColumnsOp::verify() {
  return verifyFragmentRead(*this, getN(), "column");
}

LogicalResult StoreFragmentOp::verify() {
  if (failed(verifyTile(*this, getTile().getType(), "a tile")))
    return failure();
  int64_t n = 2 * getFragment().getType().getNumElements();
  if (failed(verifyColumns(*this, n)))
    return failure();
  // Transposed, it stores 8 x 8 matrices (stmatrix.trans): whole pairs
  // of n8 column groups, at 16-byte chunks of the tile's rows.
  if (getTranspose() && (n % 16 || getCol() % 8))
    return emitOpError() << "with transpose expects a multiple of 16 "
                            "columns and a column offset that is a multiple "
                            "of 8, got "
                         << n << " columns at " << getCol();
  int64_t rows = getTranspose() ? n : kFragmentRows;
  int64_t cols = getTranspose() ? kFragmentRows : n;
  MemRefType t = getTile().getType();
  if (getRow() < 0 || getCol() < 0 || getRow() + rows > t.getDimSize(0) ||
      getCol() + cols > t.getDimSize(1))
    return emitOpError() << "writes outside its tile";
  return success();
}

LogicalResult ReduceDkvOp::verify() {
  int64_t n = 2 * getPartial().getType().getNumElements();
  if (failed(verifyColumns(*this, n)))
    return failure();
  if (n % 32)
    return emitOpError() << "expects a multiple of 32 columns (each "
                            "reduction covers 128-byte lines of dkv rows)";
  if (getSlots().getType().getNumElements() != n / 2)
    return emitOpError() << "expects one slot per fragment element";
  int64_t width = getDkv().getType().getDimSize(2);
  if (ShapedType::isDynamic(width) || getCol() < 0 || getCol() % 4 ||
      getCol() + n > width)
    return emitOpError() << "reduces columns " << getCol() << " + " << n
                         << " outside dkv's " << width;
  return success();
}

LogicalResult StoreRowsOp::verify() {
  int64_t n = 2 * getFragment().getType().getNumElements();
  if (failed(verifyColumns(*this, n)))
    return failure();
  MemRefType dest = getDest().getType();
  if (ShapedType::isDynamic(dest.getDimSize(1)) ||
      ShapedType::isDynamic(dest.getDimSize(2)) ||
      dest.getDimSize(1) < kFragmentRows || getCol() < 0 ||
      getCol() + n > dest.getDimSize(2))
    return emitOpError() << "writes outside the rows of its destination";
  return success();
}
