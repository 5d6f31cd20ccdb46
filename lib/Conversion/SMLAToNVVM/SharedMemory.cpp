//===- SharedMemory.cpp - place and verify shared-memory tiles ------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Every scratch tile of a kernel is a slice of one dynamic shared-memory
// buffer. Two slices may share bytes only if their live ranges are
// disjoint. The allocator and the verifier use the same conservative
// liveness (computeLiveRange), and the verifier re-derives everything from
// the lowered IR, so a bug in the allocator (or a later rewrite) cannot
// silently alias two live tiles.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAALLOCATESMEM
#define GEN_PASS_DEF_SMLAVERIFYSMEM
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

void mlir::smla::numberOps(Operation *root,
                           llvm::DenseMap<Operation *, int64_t> &order,
                           llvm::DenseMap<Operation *, int64_t> &ends) {
  int64_t next = 0;
  std::function<void(Operation *)> visit = [&](Operation *op) {
    order[op] = next++;
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Operation &nested : block)
          visit(&nested);
    ends[op] = next;
  };
  visit(root);
}

static bool isLoop(Operation *op) {
  return isa<scf::ForOp, scf::WhileOp, scf::ParallelOp>(op);
}

/// Every op that touches `buffer`: its users, and transitively the users of
/// what side-effect-free users derive from it (views, addresses).
void mlir::smla::collectUses(Value buffer,
                             SmallVectorImpl<Operation *> &uses) {
  SmallVector<Value> work{buffer};
  DenseSet<Value> seen{buffer};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      uses.push_back(user);
      if (user->getNumRegions())
        continue;
      // A side-effect-free user derives views or addresses; any user may
      // return a handle to the buffer (a dialect type such as
      // !smla_gpu.pipeline, whose mbarriers are the buffer's words), whose
      // uses use the buffer.
      bool pure = isMemoryEffectFree(user);
      for (Value r : user->getResults()) {
        bool handle = !isa<BuiltinDialect>(r.getType().getDialect());
        if ((pure || handle) && seen.insert(r).second)
          work.push_back(r);
      }
    }
  }
}

LiveRange mlir::smla::computeLiveRange(
    Value buffer, const llvm::DenseMap<Operation *, int64_t> &order) {
  SmallVector<Operation *> uses;
  collectUses(buffer, uses);
  Operation *def = buffer.getDefiningOp();
  Region *defRegion = def ? def->getParentRegion()
                          : cast<BlockArgument>(buffer).getParentRegion();
  LiveRange range{INT64_MAX, INT64_MIN};
  auto cover = [&](int64_t b, int64_t e) {
    range.begin = std::min(range.begin, b);
    range.end = std::max(range.end, e);
  };
  if (def)
    cover(order.lookup(def), order.lookup(def) + 1);
  for (Operation *use : uses) {
    // The outermost loop around the use that does not enclose the
    // definition: the buffer is live across that loop's back edge.
    Operation *widest = use;
    for (Operation *p = use->getParentOp(); p; p = p->getParentOp()) {
      if (p->isAncestor(def ? def : defRegion->getParentOp()))
        break;
      if (isLoop(p))
        widest = p;
    }
    int64_t b = order.lookup(widest);
    int64_t e = b + 1;
    if (widest != use) {
      // Loops cover their whole body: the last nested op's position + 1.
      widest->walk([&](Operation *n) { e = std::max(e, order.lookup(n) + 1); });
    }
    cover(b, e);
  }
  if (range.begin > range.end)
    range = {0, 0};
  return range;
}

namespace {
int64_t byteSize(MemRefType type) {
  return type.getNumElements() *
         llvm::divideCeil(type.getElementTypeBitWidth(), 8);
}

bool isWorkgroup(MemRefType type) {
  return gpu::GPUDialect::isWorkgroupMemoryAddressSpace(type.getMemorySpace());
}

MemRefType workgroupBytes(MLIRContext *ctx, int64_t n) {
  return MemRefType::get(
      {n}, IntegerType::get(ctx, 8), MemRefLayoutAttrInterface{},
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
}

/// The external, zero-sized workgroup global: `.extern .shared .b8 x[]`.
void ensureSmemGlobal(gpu::GPUModuleOp module) {
  if (module.lookupSymbol(kSmemGlobal))
    return;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  memref::GlobalOp::create(b, module.getLoc(), kSmemGlobal,
                           b.getStringAttr("public"),
                           workgroupBytes(b.getContext(), 0), Attribute(),
                           /*constant=*/false, b.getI64IntegerAttr(1024));
}

constexpr int64_t kAlign = 128;

struct SMLAAllocateSmemPass
    : public mlir::smla::impl::SMLAAllocateSmemBase<SMLAAllocateSmemPass> {
  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    for (auto func : module.getOps<gpu::GPUFuncOp>()) {
      // dQ accumulators in registers (smla-gpu-map's mark) get no bytes.
      SmallVector<memref::AllocaOp> allocas;
      func.walk([&](memref::AllocaOp a) {
        if (isWorkgroup(a.getType()) && !a->hasAttr(kDqRegistersAttr) &&
            !a->hasAttr(kFusedEpilogueAttr))
          allocas.push_back(a);
      });
      if (allocas.empty())
        continue;
      if (llvm::any_of(allocas, [&](memref::AllocaOp a) {
            return a->getParentOp() != func.getOperation() ||
                   !a.getType().hasStaticShape();
          })) {
        func.emitOpError() << "has a workgroup buffer that is not a "
                              "statically shaped alloca at the kernel's top";
        return signalPassFailure();
      }
      llvm::DenseMap<Operation *, int64_t> order, ends;
      numberOps(func, order, ends);
      // First fit, in program order, against the placed buffers that are
      // live at the same time.
      struct Placed {
        LiveRange live;
        int64_t offset, size;
      };
      SmallVector<Placed> placed;
      SmallVector<int64_t> offsets;
      int64_t total = 0;
      for (memref::AllocaOp a : allocas) {
        LiveRange live = computeLiveRange(a.getResult(), order);
        int64_t size = llvm::alignTo(byteSize(a.getType()), kAlign);
        // A swizzled wgmma operand asks for more (memref.alloca alignment).
        int64_t align = std::max<int64_t>(kAlign, a.getAlignment().value_or(0));
        int64_t offset = 0;
        bool moved = true;
        while (moved) {
          moved = false;
          for (const Placed &p : placed)
            if (p.live.overlaps(live) && offset < p.offset + p.size &&
                p.offset < offset + size) {
              offset = llvm::alignTo(p.offset + p.size, align);
              moved = true;
            }
        }
        placed.push_back({live, offset, size});
        offsets.push_back(offset);
        total = std::max(total, offset + size);
      }
      if (total > kMaxDynamicSmem) {
        func.emitOpError() << "needs " << total
                           << " bytes of shared memory, more than the "
                           << kMaxDynamicSmem
                           << " an sm_90 CTA can have; use a smaller block";
        return signalPassFailure();
      }
      ensureSmemGlobal(module);
      OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
      Location loc = func.getLoc();
      Value global = memref::GetGlobalOp::create(
          b, loc, workgroupBytes(b.getContext(), 0), kSmemGlobal);
      Value raw = memref::ReinterpretCastOp::create(
          b, loc, workgroupBytes(b.getContext(), total), global, 0,
          ArrayRef<int64_t>{total}, ArrayRef<int64_t>{1});
      for (auto [a, offset] : llvm::zip(allocas, offsets)) {
        b.setInsertionPoint(a);
        Value off = arith::ConstantIndexOp::create(b, a.getLoc(), offset);
        Value view = memref::ViewOp::create(b, a.getLoc(), a.getType(), raw,
                                            off, ValueRange{});
        a.replaceAllUsesWith(view);
        a.erase();
      }
      func->setAttr(kDynamicSmemAttr, b.getI64IntegerAttr(total));
    }
  }
};

/// The byte offset of a view of the shared-memory buffer, if constant.
std::optional<int64_t> constantOffset(memref::ViewOp view) {
  APInt value;
  if (matchPattern(view.getByteShift(), m_ConstantInt(&value)))
    return value.getSExtValue();
  return std::nullopt;
}

bool viewsSmem(memref::ViewOp view) {
  Value src = view.getSource();
  if (auto cast = src.getDefiningOp<memref::ReinterpretCastOp>())
    src = cast.getSource();
  auto get = src.getDefiningOp<memref::GetGlobalOp>();
  return get && get.getName() == kSmemGlobal;
}

struct SMLAVerifySmemPass
    : public mlir::smla::impl::SMLAVerifySmemBase<SMLAVerifySmemPass> {
  void runOnOperation() override {
    bool ok = true;
    for (auto func : getOperation().getOps<gpu::GPUFuncOp>()) {
      SmallVector<memref::ViewOp> views;
      func.walk([&](memref::ViewOp v) {
        if (viewsSmem(v))
          views.push_back(v);
      });
      llvm::DenseMap<Operation *, int64_t> order, ends;
      numberOps(func, order, ends);
      auto limitAttr = func->getAttrOfType<IntegerAttr>(kDynamicSmemAttr);
      struct Slice {
        memref::ViewOp view;
        int64_t begin, end;
        LiveRange live;
      };
      SmallVector<Slice> slices;
      for (memref::ViewOp v : views) {
        std::optional<int64_t> offset = constantOffset(v);
        if (!offset || !v.getType().hasStaticShape()) {
          v.emitOpError() << "is a shared-memory slice whose byte range is "
                             "not a compile-time constant";
          ok = false;
          continue;
        }
        int64_t end = *offset + byteSize(v.getType());
        if (!limitAttr || end > limitAttr.getInt()) {
          v.emitOpError() << "is a shared-memory slice [" << *offset << ", "
                          << end << ") past the kernel's " << kDynamicSmemAttr
                          << " of " << (limitAttr ? limitAttr.getInt() : 0)
                          << " bytes";
          ok = false;
        }
        slices.push_back({v, *offset, end, computeLiveRange(v, order)});
      }
      for (size_t i = 0; i < slices.size(); ++i)
        for (size_t j = i + 1; j < slices.size(); ++j) {
          Slice &a = slices[i], &c = slices[j];
          if (a.begin < c.end && c.begin < a.end && a.live.overlaps(c.live)) {
            InFlightDiagnostic diag =
                c.view.emitOpError()
                << "shares shared-memory bytes [" << std::max(a.begin, c.begin)
                << ", " << std::min(a.end, c.end)
                << ") with a slice that is live at the same time";
            diag.attachNote(a.view.getLoc()) << "the other live slice";
            ok = false;
          }
        }
    }
    if (!ok)
      signalPassFailure();
  }
};
} // namespace
