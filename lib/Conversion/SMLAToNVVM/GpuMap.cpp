//===- GpuMap.cpp - guarded tile loop nest -> gpu.funcs -------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// One CTA per (token, head block): the decomposed loop nest's `t` and head
// block loops become the grid, the top-k block loop stays inside the CTA
// (without a head split, one head block per kv group). The tile ops
// are cloned unchanged; only the values they read change: kernel
// parameters are bare pointers, re-shaped into the original dynamically
// sized memrefs with memref.reinterpret_cast, and scratch allocas move to
// the workgroup address space.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAGPUMAP
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// Kernel parameters are flat pointers; this static length is never used
/// for addressing (the bare-pointer ABI drops it).
constexpr int64_t kFlatLength = 2147483647;
/// Extra f32 columns per row of an f32 tile whose rows are a multiple of
/// 32 words: 8 (the row shifts by 8 banks) for the mma.sync C fragments,
/// whose 8-byte stores put 4 rows in a half-warp; 4 in the kernels planned
/// for the wgmma scatter (512 threads), whose S and dP epilogue and
/// pack_dkv touch rows 2 apart (with 8 those rows share banks: 2-way
/// conflicts; with 4 there are none).
constexpr int64_t kF32TilePad = 8, kF32TilePadWgmma = 4;

/// The role of each function argument, found from the tile ops using it.
struct Roles {
  Value q, kv, o, dout, indices, lse, positions, dq, dkvAccum, dkv, counters;
  /// The caller's Delta ([T, H] f32, smla.delta's `given`): null at run
  /// time when the caller passes none.
  Value delta;
  /// Slots per token ([T] i32), which the index loads' `length` reads.
  Value topkLength;
  /// The final smla.cast_dkv counts non-finite rows (into `counters`).
  bool castCounts = false;
  /// (name, value) in parameter order; null values are absent.
  SmallVector<std::pair<StringRef, Value>> ordered() const {
    return {{"q", q},
            {"kv", kv},
            {"o", o},
            {"do", dout},
            {"indices", indices},
            {"lse", lse},
            {"q_positions", positions},
            {"dq", dq},
            {"dkv_accum", dkvAccum},
            {"counters", counters},
            {"delta", delta},
            {"topk_length", topkLength}};
  }
};

/// The tensor whose element `v` is computed from: the memref of the one
/// memref.load among the ops `v` depends on (a token's slot count is
/// min(K, max(0, topk_length[t])) as an index).
Value loadedTensor(Value v) {
  SmallVector<Value> work{v};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    Operation *def = x.getDefiningOp();
    if (!def || !seen.insert(x).second)
      continue;
    if (auto load = dyn_cast<memref::LoadOp>(def))
      return load.getMemRef();
    llvm::append_range(work, def->getOperands());
  }
  return {};
}

FailureOr<Roles> findRoles(func::FuncOp func) {
  Roles r;
  func.walk([&](Operation *op) {
    if (auto o = dyn_cast<GatherOp>(op))
      r.kv = o.getKv();
    else if (auto o = dyn_cast<ScatterDkvOp>(op)) {
      r.q = o.getQ();
      r.dout = o.getDout();
      r.dkvAccum = o.getDkv();
    } else if (auto o = dyn_cast<DeltaOp>(op)) {
      r.o = o.getO();
      if (o.getGiven())
        r.delta = o.getGiven();
    } else if (auto o = dyn_cast<IndexLoadOp>(op)) {
      r.indices = o.getIndices();
      if (o.getCounters())
        r.counters = o.getCounters();
      if (Value limit = o.getLimit())
        if (auto load = limit.getDefiningOp<memref::LoadOp>())
          r.positions = load.getMemRef();
      if (Value length = o.getLength())
        r.topkLength = loadedTensor(length);
    } else if (auto o = dyn_cast<RowLiveOp>(op)) {
      r.lse = o.getLse();
      if (o.getCounters())
        r.counters = o.getCounters();
    } else if (auto o = dyn_cast<IndexMaskOp>(op)) {
      // With split heads the invalid-slot counter sits on a mask only.
      if (o.getCounters())
        r.counters = o.getCounters();
    } else if (auto o = dyn_cast<StoreDqOp>(op)) {
      r.dq = o.getDq();
      if (o.getCounters())
        r.counters = o.getCounters();
    } else if (auto o = dyn_cast<CastDkvOp>(op)) {
      r.dkv = o.getDkv();
      if (o.getCounters()) {
        r.counters = o.getCounters();
        r.castCounts = true;
      }
    }
  });
  for (auto [name, v] : r.ordered()) {
    bool optional = name == "q_positions" || name == "counters" ||
                    name == "delta" || name == "topk_length";
    if (!v && optional)
      continue;
    if (!v || !isa<BlockArgument>(v) ||
        cast<BlockArgument>(v).getOwner()->getParentOp() != func)
      return func.emitOpError()
             << "cannot map to the GPU: the '" << name
             << "' tensor of the tile ops is not a function argument";
  }
  return r;
}

/// Run-time sizes of a kernel, as index values.
struct Sizes {
  Value tokens, keys, topk;
};

/// `memref.reinterpret_cast` of the flat pointer `flat` to `type` (the
/// original argument type, identity layout), whose dynamic sizes are T or
/// S_kv (dim 0) and K (dim 2 of indices).
Value reshape(OpBuilder &b, Location loc, Value flat, MemRefType type,
              Value dim0, Value dim2) {
  SmallVector<OpFoldResult> sizes, strides(type.getRank());
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (!type.isDynamicDim(i))
      sizes.push_back(b.getIndexAttr(type.getDimSize(i)));
    else
      sizes.push_back(i == 0 ? dim0 : dim2);
  }
  OpFoldResult stride = b.getIndexAttr(1);
  for (int64_t i = type.getRank() - 1; i >= 0; --i) {
    strides[i] = stride;
    auto s = getConstantIntValue(stride), n = getConstantIntValue(sizes[i]);
    if (s && n) {
      stride = b.getIndexAttr(*s * *n);
    } else {
      auto v = [&](OpFoldResult f) -> Value {
        if (auto val = dyn_cast<Value>(f))
          return val;
        return arith::ConstantIndexOp::create(b, loc, *getConstantIntValue(f));
      };
      stride =
          arith::MulIOp::create(b, loc, v(stride), v(sizes[i])).getResult();
    }
  }
  return memref::ReinterpretCastOp::create(b, loc, type, flat,
                                           b.getIndexAttr(0), sizes, strides);
}

class KernelBuilder {
public:
  KernelBuilder(gpu::GPUModuleOp module, int64_t threads)
      : module(module), threads(threads) {}

  /// A kernel with pointer parameters for `tensors` and i32 `scalars`
  /// (f32 for the run-time softmax scale, kScaleParam).
  gpu::GPUFuncOp create(StringRef name, StringRef kind,
                        ArrayRef<std::pair<StringRef, Value>> tensors,
                        ArrayRef<StringRef> scalars, ArrayRef<StringRef> grid) {
    SmallVector<std::pair<StringRef, Type>> typed;
    for (auto [n, v] : tensors)
      typed.push_back({n, v.getType()});
    return create(name, kind, typed, scalars, grid);
  }

  gpu::GPUFuncOp create(StringRef name, StringRef kind,
                        ArrayRef<std::pair<StringRef, Type>> tensors,
                        ArrayRef<StringRef> scalars, ArrayRef<StringRef> grid) {
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    SmallVector<Type> types;
    SmallVector<Attribute> names;
    for (auto [n, t] : tensors) {
      auto type = cast<MemRefType>(t);
      types.push_back(MemRefType::get({kFlatLength}, type.getElementType()));
      names.push_back(b.getStringAttr(n));
    }
    for (StringRef n : scalars) {
      types.push_back(n == kScaleParam ? Type(b.getF32Type())
                                       : Type(b.getI32Type()));
      names.push_back(b.getStringAttr(n));
    }
    auto func = gpu::GPUFuncOp::create(b, module.getLoc(), name,
                                       b.getFunctionType(types, {}));
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    func.setKnownBlockSizeAttr(
        b.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
    func->setAttr(kKernelKindAttr, b.getStringAttr(kind));
    func->setAttr(kParamNamesAttr, b.getArrayAttr(names));
    SmallVector<Attribute> gridAttrs;
    for (StringRef g : grid)
      gridAttrs.push_back(b.getStringAttr(g));
    func->setAttr(kGridAttr, b.getArrayAttr(gridAttrs));
    return func;
  }

  gpu::GPUModuleOp module;
  int64_t threads;
};

/// The pair-union kernel (smla.pair_union): params indices, pair_rows
/// ([2T, 1, W] int32), pair_lengths ([T] int32), T (pairs), S_kv, K and
/// pair_width (W >= 2K: the op may put token t's row in dq's memory of
/// token t, python/csrc/TokenPairs.h). Its scratch holds K <=
/// kPairUnionMaxTopk (a table of 4K entries).
void addPairUnionKernel(KernelBuilder &kb, StringRef prefix, Value indices,
                        Location loc, int64_t threads) {
  MLIRContext *ctx = indices.getContext();
  auto i32 = IntegerType::get(ctx, 32);
  auto rowsType = cast<MemRefType>(indices.getType());
  auto lengthsType = MemRefType::get({ShapedType::kDynamic}, i32);
  gpu::GPUFuncOp kernel = kb.create(
      (prefix + "_pair_union").str(), "pair_union",
      ArrayRef<std::pair<StringRef, Type>>{{"indices", rowsType},
                                           {"pair_rows", rowsType},
                                           {"pair_lengths", lengthsType}},
      {"T", "S_kv", "K", "pair_width"}, {"T", "1", "1"});
  OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
  Block &entry = kernel.getBody().front();
  auto scalar = [&](unsigned i) -> Value {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                      entry.getArgument(i));
  };
  Value pairsN = scalar(3), keys = scalar(4), topk = scalar(5);
  Value two = arith::ConstantIndexOp::create(b, loc, 2);
  Value tokens = arith::MulIOp::create(b, loc, pairsN, two);
  Value width = scalar(6);
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto scratch = [&](int64_t n) -> Value {
    return memref::AllocaOp::create(
        b, loc, MemRefType::get({n}, i32, MemRefLayoutAttrInterface(), workgroup));
  };
  Value table = scratch(4 * kPairUnionMaxTopk);
  Value positions = scratch(4 * kPairUnionMaxTopk);
  Value ranks = scratch(kPairUnionMaxTopk + 2);
  Value partials = scratch(threads);
  Value idx = reshape(b, loc, entry.getArgument(0), rowsType, tokens, topk);
  Value rows = reshape(b, loc, entry.getArgument(1), rowsType, tokens, width);
  Value lengths = reshape(b, loc, entry.getArgument(2), lengthsType, pairsN,
                          pairsN);
  Value pair = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  PairUnionOp::create(b, loc, idx, pair, keys, rows, lengths, table, positions,
                      ranks, partials);
  gpu::ReturnOp::create(b, loc);
}

/// Views of the kernel parameters in the original types, and the sizes.
/// `indexRowsPerToken`: index and position rows per (folded) token, 2 for
/// a tokens = 2 step (its T counts pairs; indices and positions are per
/// token).
Sizes bindParams(OpBuilder &b, Location loc, gpu::GPUFuncOp kernel,
                 ArrayRef<std::pair<StringRef, Value>> tensors,
                 ArrayRef<StringRef> scalars, IRMapping &mapping,
                 int64_t indexRowsPerToken = 1) {
  Block &entry = kernel.getBody().front();
  Sizes s;
  // The scalars are the last parameters (a kernel may take tensors beyond
  // `tensors`, bound by its builder).
  unsigned firstScalar = entry.getNumArguments() - scalars.size();
  for (auto [i, name] : llvm::enumerate(scalars)) {
    if (name == kScaleParam || name == kWalkParam)
      continue; // read by smla-lower-to-nvvm (runtimeScale), rotateBlockWalk
    Value v = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                         entry.getArgument(firstScalar + i));
    (name == "T" ? s.tokens : name == "S_kv" ? s.keys : s.topk) = v;
  }
  Value indexRows = s.tokens;
  if (indexRowsPerToken > 1 && s.tokens)
    indexRows = arith::MulIOp::create(
        b, loc, s.tokens,
        arith::ConstantIndexOp::create(b, loc, indexRowsPerToken));
  for (auto [i, entryPair] : llvm::enumerate(tensors)) {
    auto [name, v] = entryPair;
    bool keyed = name == "kv" || name == "dkv_accum" || name == "dkv";
    bool perToken =
        name == "indices" || name == "q_positions" || name == "topk_length";
    Value view =
        reshape(b, loc, entry.getArgument(i), cast<MemRefType>(v.getType()),
                keyed ? s.keys : perToken ? indexRows : s.tokens, s.topk);
    mapping.map(v, view);
  }
  return s;
}

/// Clones the op defining `v` (and, first, what it depends on) unless `v`
/// is already mapped.
LogicalResult cloneDefinition(OpBuilder &b, Value v, IRMapping &mapping) {
  if (mapping.contains(v))
    return success();
  Operation *def = v.getDefiningOp();
  if (!def || def->getNumRegions())
    return failure();
  for (Value operand : def->getOperands())
    if (failed(cloneDefinition(b, operand, mapping)))
      return failure();
  b.clone(*def, mapping);
  return success();
}

/// A tokens = 2 CTA (pair `pair`) walks only the blocks below its rows'
/// length: slots from pair_lengths[pair] on are -1 in both rows
/// (smla.pair_union), so they would only be masked. The length is clamped
/// to [0, K]; the invalid-slot counter then counts the walked slots past
/// K's own (the caller subtracts them, python/csrc/TokenPairs.h).
LogicalResult boundPairWalk(OpBuilder &b, Location loc, scf::ForOp loop,
                            Value flatLengths, MemRefType lengthsType,
                            const Sizes &sizes, Value pair) {
  int64_t block = 0;
  loop.walk([&](IndexLoadOp load) {
    block = load.getResult().getType().getNumElements();
  });
  if (block <= 0 || !matchPattern(loop.getLowerBound(), m_Zero()) ||
      !matchPattern(loop.getStep(), m_One()))
    return loop.emitOpError()
           << "cannot bound the pair walk: expected a loop over index blocks "
              "from 0 in steps of 1";
  // At b's insertion point, where the rotation (rotateBlockWalk) reads it.
  Value lengths =
      reshape(b, loc, flatLengths, lengthsType, sizes.tokens, sizes.tokens);
  Value length = arith::IndexCastOp::create(
      b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, lengths, pair));
  length = arith::MinSIOp::create(
      b, loc,
      arith::MaxSIOp::create(b, loc, length,
                             arith::ConstantIndexOp::create(b, loc, 0)),
      sizes.topk);
  Value blocks = arith::CeilDivUIOp::create(
      b, loc, length, arith::ConstantIndexOp::create(b, loc, block));
  loop.getUpperBoundMutable().assign(blocks);
  return success();
}

/// A null topk_length pointer means K slots for every token: each read of
/// `lengths` becomes `ptr == 0 ? K : lengths[t]`, the load only where the
/// pointer is not null.
void defaultNullLengths(gpu::GPUFuncOp kernel, Value lengths, Value topk) {
  SmallVector<memref::LoadOp> loads;
  kernel.walk([&](memref::LoadOp load) {
    if (load.getMemRef() == lengths)
      loads.push_back(load);
  });
  for (memref::LoadOp load : loads) {
    OpBuilder b(load);
    Location loc = load.getLoc();
    Value ptr = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, lengths);
    Value none = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, ptr,
        arith::ConstantIndexOp::create(b, loc, 0));
    auto pick = scf::IfOp::create(
        b, loc, none,
        [&](OpBuilder &tb, Location l) {
          scf::YieldOp::create(
              tb, l,
              arith::IndexCastOp::create(tb, l, tb.getI32Type(), topk)
                  .getResult());
        },
        [&](OpBuilder &eb, Location l) {
          scf::YieldOp::create(eb, l, eb.clone(*load)->getResults());
        });
    load.getResult().replaceAllUsesWith(pick.getResult(0));
    load->erase();
  }
}

/// The `g` loop: the scf.for directly in the token loop's body.
scf::ForOp findGroupLoop(scf::ForOp tokenLoop) {
  for (auto loop : tokenLoop.getBody()->getOps<scf::ForOp>())
    return loop;
  return {};
}

LogicalResult mapFunction(func::FuncOp func, gpu::GPUModuleOp module,
                          int64_t threads, int64_t ctasPerSm, bool mma,
                          bool wgmmaScatter, bool clusterHeadBlocks,
                          bool stageRows) {
  FailureOr<Roles> roles = findRoles(func);
  if (failed(roles))
    return failure();
  scf::ForOp tokenLoop;
  for (auto loop : func.getBody().front().getOps<scf::ForOp>())
    tokenLoop = loop;
  scf::ForOp groupLoop = tokenLoop ? findGroupLoop(tokenLoop) : scf::ForOp();
  if (!groupLoop)
    return func.emitOpError()
           << "cannot map to the GPU: expected the token loop and the group "
              "loop of smla-decompose";
  std::optional<int64_t> headBlocks =
      getConstantIntValue(groupLoop.getUpperBound());
  if (!headBlocks || !matchPattern(groupLoop.getLowerBound(), m_Zero()) ||
      !matchPattern(groupLoop.getStep(), m_One()))
    return groupLoop.emitOpError()
           << "cannot map to the GPU: the head block loop must run from 0 "
              "to a constant in steps of 1";
  Location loc = func.getLoc();
  KernelBuilder kb(module, threads);
  SmallVector<std::pair<StringRef, Value>> tensors;
  for (auto entry : roles->ordered())
    if (entry.second)
      tensors.push_back(entry);
  SmallVector<StringRef> scalars{"T", "S_kv", "K", kScaleParam, kWalkParam};
  std::string G = std::to_string(*headBlocks);

  // Key sharing (tokens = 2, smla.index_pair in the step): the bwd kernel
  // also takes pair_union's lengths (after the tensors of `roles`).
  bool pairs = false;
  func.walk([&](IndexPairOp) { pairs = true; });
  auto lengthsType =
      MemRefType::get({ShapedType::kDynamic}, IntegerType::get(func.getContext(), 32));

  // The backward kernel: grid (T, G * headBlocks).
  {
    SmallVector<std::pair<StringRef, Type>> params;
    for (auto [name, v] : tensors)
      params.push_back({name, v.getType()});
    if (pairs)
      params.push_back({"pair_lengths", lengthsType});
    gpu::GPUFuncOp kernel = kb.create((func.getName() + "_bwd").str(), "bwd",
                                      params, scalars, {"T", G, "1"});
    kernel->setAttr(kCtasPerSmAttr,
                    Builder(kernel.getContext()).getI64IntegerAttr(ctasPerSm));
    OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
    IRMapping mapping;
    Sizes sizes = bindParams(b, loc, kernel, tensors, scalars, mapping,
                             pairs ? 2 : 1);
    Value t = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value g = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    DenseMap<Value, Value> inPlace = inPlaceTiles(func);
    for (auto alloca : func.getBody().front().getOps<memref::AllocaOp>()) {
      if (inPlace.count(alloca.getResult()))
        continue;
      MemRefType type = alloca.getType();
      SmallVector<int64_t> shape(type.getShape());
      // Key tiles (gather destinations) get rows padded by 16 bytes: with a
      // row stride of 1152 B (576 bf16) the 8 rows that one mma fragment or
      // ldmatrix phase reads fall into the same banks (8-way conflicts);
      // 1168 B shifts each row by 4 banks. cp.async chunks stay 16 B aligned.
      bool isKeyTile = llvm::any_of(alloca->getUsers(), [&](Operation *user) {
        auto gather = dyn_cast<GatherOp>(user);
        return gather && gather.getTile() == alloca.getResult();
      });
      if (isKeyTile && shape.size() == 2 && type.getElementType().isBF16() &&
          shape[1] % 8 == 0)
        shape[1] += kKeyTilePad;
      // f32 tiles (scores, P, dP, dS, the dQ accumulator) whose rows are a
      // multiple of 32 words long would put the 8 rows one mma C fragment
      // stores (row = lane / 4) in the same banks: their rows get more
      // words (kF32TilePad), and the tile ops see a [R, C] view.
      bool padF32 = shape.size() == 2 && type.getElementType().isF32() &&
                    shape[1] % 32 == 0;
      SmallVector<int64_t> logical(shape);
      if (padF32)
        shape[1] += mma && wgmmaScatter && threads == 512 ? kF32TilePadWgmma
                                                           : kF32TilePad;
      auto wg = MemRefType::get(
          shape, type.getElementType(), MemRefLayoutAttrInterface{},
          gpu::AddressSpaceAttr::get(b.getContext(),
                                     gpu::AddressSpace::Workgroup));
      Value buffer = memref::AllocaOp::create(b, alloca.getLoc(), wg);
      if (padF32) {
        SmallVector<OpFoldResult> zeros(2, b.getIndexAttr(0)),
            ones(2, b.getIndexAttr(1));
        SmallVector<OpFoldResult> sizes{b.getIndexAttr(logical[0]),
                                        b.getIndexAttr(logical[1])};
        buffer = memref::SubViewOp::create(b, alloca.getLoc(), buffer, zeros,
                                           sizes, ones);
      }
      mapping.map(alloca.getResult(), buffer);
    }
    for (auto [result, input] : inPlace)
      mapping.map(result, mapping.lookup(input));
    SetVector<Value> above;
    getUsedValuesDefinedAbove(tokenLoop.getRegion(), above);
    for (Value v : above)
      if (failed(cloneDefinition(b, v, mapping)))
        return tokenLoop.emitOpError()
               << "cannot map to the GPU: uses a value computed by an op "
                  "with regions outside the token loop";
    mapping.map(tokenLoop.getInductionVar(), t);
    mapping.map(groupLoop.getInductionVar(), g);
    Block::iterator bodyStart = std::prev(b.getInsertionPoint());
    for (Operation &op : tokenLoop.getBody()->without_terminator()) {
      if (&op != groupLoop.getOperation()) {
        b.clone(op, mapping);
        continue;
      }
      for (Operation &inner : groupLoop.getBody()->without_terminator())
        b.clone(inner, mapping);
    }
    gpu::ReturnOp::create(b, loc);
    // The top-k block loop: the scf.for of the head block loop's body.
    auto blockLoops = groupLoop.getBody()->getOps<scf::ForOp>();
    if (std::distance(blockLoops.begin(), blockLoops.end()) != 1)
      return groupLoop.emitOpError()
             << "cannot map to the GPU: expected one top-k block loop";
    auto blockLoop =
        cast<scf::ForOp>(mapping.lookup((*blockLoops.begin()).getOperation()));
    b.setInsertionPointAfter(&*bodyStart);
    auto cta = arith::AddIOp::create(
        b, loc, t, arith::MulIOp::create(b, loc, g, sizes.tokens));
    // smla-defer-scatter's clusters need both head blocks of a token to
    // walk the same order: it rewrites the head block of this index.
    cta->setAttr(kWalkCtaAttr, b.getUnitAttr());
    Value period = kernel.getArgument(kernel.getNumArguments() - 1);
    if (pairs && failed(boundPairWalk(b, loc, blockLoop,
                                      kernel.getArgument(tensors.size()),
                                      lengthsType, sizes, t)))
      return failure();
    // The rotation reads the block count: with topk_length a token's own,
    // computed in the cloned body.
    OpBuilder rb = b;
    if (Operation *count = blockLoop.getUpperBound().getDefiningOp())
      if (count->getBlock() == rb.getInsertionBlock() &&
          rb.getInsertionPoint()->isBeforeInBlock(count))
        rb.setInsertionPointAfter(count);
    if (failed(rotateBlockWalk(rb, blockLoop, cta, period)))
      return failure();
    // A pair's aligned rows may live in its own tokens' dq rows (the op
    // puts them there, python/csrc/TokenPairs.h): every thread's last
    // index read comes before any thread's dq store. Barriers from
    // shared-memory footprints (smla-insert-barriers) cannot see that
    // global aliasing; the dKV chunks smla-defer-scatter puts after the
    // loop land before this barrier.
    if (pairs)
      kernel.walk([&](StoreDqOp store) {
        OpBuilder before(store);
        gpu::BarrierOp::create(before, store.getLoc());
      });
    // The dQ accumulator that the register form holds: marked here, so
    // the staging estimate below and smla-allocate-smem leave it out.
    if (mma)
      for (auto [acc, slots] : planDqRegisters(kernel))
        rootAlloca(acc)->setAttr(kDqRegistersAttr, b.getI64IntegerAttr(slots));
    // Shared memory per SM on sm_90: 228 KiB, of which 1 KiB per CTA is
    // reserved by the system.
    int64_t budget =
        std::min(kMaxDynamicSmem, kSmemPerSm / ctasPerSm - kSmemReservedPerCta);
    if (stageRows)
      stageTokenRows(b, loc, kernel, tensors, mapping, t, g, threads,
                     *headBlocks, budget, mma && wgmmaScatter,
                     clusterHeadBlocks);
    // Last: it replaces ops that `b` may still point at.
    if (roles->topkLength)
      defaultNullLengths(kernel, mapping.lookup(roles->topkLength),
                         sizes.topk);
  }

  // The dKV accumulator's zero fill and its final cast: one CTA per kv row.
  // Rank-3 tensors are viewed as that row; `counters` is passed whole.
  auto rowKernel = [&](StringRef suffix, StringRef kind,
                       ArrayRef<std::pair<StringRef, Value>> ptrs,
                       function_ref<void(OpBuilder &, ArrayRef<Value>)> body) {
    gpu::GPUFuncOp kernel = kb.create((func.getName() + suffix).str(), kind,
                                      ptrs, {"S_kv"}, {"S_kv", "1", "1"});
    OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
    IRMapping mapping;
    bindParams(b, loc, kernel, ptrs, {"S_kv"}, mapping);
    Value row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    SmallVector<Value> rows;
    for (auto [name, v] : ptrs) {
      auto type = cast<MemRefType>(v.getType());
      if (type.getRank() != 3) {
        rows.push_back(mapping.lookup(v));
        continue;
      }
      SmallVector<OpFoldResult> offsets{row, b.getIndexAttr(0),
                                        b.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes{b.getIndexAttr(1),
                                      b.getIndexAttr(type.getDimSize(1)),
                                      b.getIndexAttr(type.getDimSize(2))};
      SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
      rows.push_back(memref::SubViewOp::create(b, loc, mapping.lookup(v),
                                               offsets, sizes, strides));
    }
    body(b, rows);
    gpu::ReturnOp::create(b, loc);
  };
  rowKernel(
      "_dkv_zero", "dkv_zero", {{"dkv_accum", roles->dkvAccum}},
      [&](OpBuilder &b, ArrayRef<Value> rows) {
        Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
        linalg::FillOp::create(b, loc, ValueRange{zero}, ValueRange{rows[0]});
      });
  if (roles->dkv || roles->castCounts) {
    SmallVector<std::pair<StringRef, Value>> ptrs{
        {"dkv_accum", roles->dkvAccum}};
    if (roles->dkv)
      ptrs.push_back({"dkv", roles->dkv});
    if (roles->castCounts)
      ptrs.push_back({"counters", roles->counters});
    rowKernel("_dkv_cast", "dkv_cast", ptrs,
              [&](OpBuilder &b, ArrayRef<Value> rows) {
                Value dkv = roles->dkv ? rows[1] : Value();
                Value counters = roles->castCounts ? rows.back() : Value();
                CastDkvOp::create(b, loc, rows[0], dkv, counters);
              });
  }
  // Delta = rowsum(o * do) into the caller's [T, H] buffer, one CTA per
  // (token, head block), for callers that need Delta itself (a gradient
  // of lse folded into it, an attention sink's gradient) and then pass it
  // to the bwd kernel.
  if (roles->delta) {
    DeltaOp step;
    func.walk([&](DeltaOp op) { step = op; });
    SmallVector<std::pair<StringRef, Value>> ptrs{
        {"o", roles->o}, {"do", roles->dout}, {"delta", roles->delta}};
    gpu::GPUFuncOp kernel = kb.create((func.getName() + "_delta").str(),
                                      "delta", ptrs, {"T"}, {"T", G, "1"});
    OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
    IRMapping mapping;
    bindParams(b, loc, kernel, ptrs, {"T"}, mapping);
    Value t = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value hb = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    int64_t hg = step.getDelta().getType().getDimSize(0);
    Value row0 = arith::MulIOp::create(b, loc, hb,
                                       arith::ConstantIndexOp::create(b, loc, hg));
    Value delta = mapping.lookup(roles->delta);
    SmallVector<OpFoldResult> offsets{t, row0}, sizes{b.getIndexAttr(1),
                                                      b.getIndexAttr(hg)};
    SmallVector<OpFoldResult> strides(2, b.getIndexAttr(1));
    auto rowType = memref::SubViewOp::inferRankReducedResultType(
        {hg}, cast<MemRefType>(delta.getType()), offsets, sizes, strides);
    Value rows = memref::SubViewOp::create(b, loc, cast<MemRefType>(rowType),
                                           delta, offsets, sizes, strides);
    DeltaOp::create(b, loc, mapping.lookup(roles->o),
                    mapping.lookup(roles->dout), t, hb, /*given=*/Value(),
                    rows);
    gpu::ReturnOp::create(b, loc);
  }
  // Key sharing: the aligned index rows of token pairs, one CTA per pair
  // ("T" is the pair count, as for the bwd kernel).
  if (pairs)
    addPairUnionKernel(kb, func.getName(), roles->indices, loc, threads);
  func.erase();
  return success();
}

struct SMLAGpuMapPass
    : public mlir::smla::impl::SMLAGpuMapBase<SMLAGpuMapPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (threads <= 0 || threads % 32 || threads > 1024) {
      module.emitError() << "smla-gpu-map: threads must be a positive "
                            "multiple of 32, at most 1024; got "
                         << threads;
      return signalPassFailure();
    }
    if (ctasPerSm < 1 || ctasPerSm > 32) {
      module.emitError() << "smla-gpu-map: ctas-per-sm must be in [1, 32]; "
                            "got "
                         << ctasPerSm;
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> funcs;
    for (auto func : module.getOps<func::FuncOp>()) {
      bool hasTiles = false;
      func.walk([&](Operation *op) {
        hasTiles |= isa<SMLADialect>(op->getDialect());
      });
      if (hasTiles)
        funcs.push_back(func);
    }
    if (funcs.empty())
      return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(&getContext()));
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    auto gpuModule =
        gpu::GPUModuleOp::create(b, module.getLoc(), "smla_kernels");
    bool withMma = mmaEnabled(module, mma);
    for (func::FuncOp func : funcs)
      if (failed(mapFunction(func, gpuModule, threads, ctasPerSm, withMma,
                             wgmmaScatter, clusterHeadBlocks,
                             stageTokenRows)))
        return signalPassFailure();
  }
};
} // namespace
