//===- smla-compile.cpp - kernel configs -> cubins + manifest -------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// For each --config, builds the smla.sparse_attention_bwd function, runs
// the smla-gpu pipeline in process, extracts the PTX, assembles it with
// ptxas -arch=sm_90a, refuses spills (beyond the configuration's max_spill,
// unless --allow-spills), and writes
//   <out>/<name>.ptx, <out>/<name>.cubin, <out>/manifest.json
// The manifest format is described in runtime/MANIFEST.md; each kernel
// records the compiler's source commit and the configuration it was given.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Dialect/SMLA/IR/SMLA.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"
#include "smla/Pipelines/Pipelines.h"
#include "smla/Target/KernelSpec.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

#include "CompilerVersion.inc"

using namespace mlir;
using namespace mlir::smla;
namespace cl = llvm::cl;

static cl::list<std::string>
    configs("config",
            cl::desc("Kernel configuration, e.g. d=512,dt=64,"
                     "heads=16,groups=1,block=64,lse=base2,"
                     "positions=1,dq=bf16,dkv=bf16 (repeatable)"),
            cl::value_desc("key=value,..."));
static cl::opt<std::string> outDir("o", cl::desc("Output directory"),
                                   cl::value_desc("dir"), cl::Required);
static cl::opt<std::string> ptxasPath("ptxas", cl::desc("ptxas to run"),
                                      cl::init("/usr/local/cuda/bin/ptxas"));
static cl::opt<bool> allowSpills("allow-spills",
                                 cl::desc("Accept kernels that spill"),
                                 cl::init(false));
static cl::opt<bool> emitMlir("emit-mlir",
                              cl::desc("Also write <name>.kernels.mlir "
                                       "(the lowered gpu.funcs)"),
                              cl::init(false));
static cl::opt<bool> useMma("mma",
                            cl::desc("Tensor cores (mma.sync) for the block "
                                     "products; false: CUDA-core fallback"),
                            cl::init(true));
static cl::opt<bool> prefetchKeys(
    "prefetch-keys",
    cl::desc("Issue the next top-k block's key gather during this block's "
             "dKV scatter (smla-prefetch-keys; not for scatter=wgmma "
             "configurations); false: gather, then wait, at the start of "
             "each block"),
    cl::init(true));
static cl::opt<int> ctaThreads(
    "cta-threads", cl::desc("Threads per CTA of the bwd kernel (a multiple of 32, "
                        "64 to 1024)"),
    cl::init(256));
static cl::opt<int> ctasPerSm(
    "ctas-per-sm",
    cl::desc("Stage q/do rows in shared memory only within the share that "
             "leaves room for this many bwd CTAs per SM, and cap registers "
             "for as many (.minnctapersm; 1 to 32)"),
    cl::init(1));
static cl::opt<bool> quiet("quiet", cl::desc("Print nothing on success"),
                           cl::init(false));

static int fail(const llvm::Twine &msg) {
  llvm::errs() << "smla-compile: error: " << msg << "\n";
  return 1;
}

static bool writeFile(llvm::StringRef path, llvm::StringRef data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return false;
  os << data;
  return true;
}

/// Whether some kernel of `module` carries `attr`: nvvm.cluster_dim (the
/// two-head-block cluster was built), smla.fused_epilogue (an epilogue
/// was fused into the products), smla.overlap_run (a chunk runs
/// alongside it).
static bool hasMarkedKernel(ModuleOp module, llvm::StringRef attr) {
  bool found = false;
  module.walk([&](gpu::GPUFuncOp f) { found |= f->hasAttr(attr); });
  return found;
}

/// The most dKV chunks that a kernel of `module` runs alongside its fused
/// epilogue (smla-defer-scatter marks the gpu.func with the count).
static int64_t overlapChunksOf(ModuleOp module) {
  int64_t most = 0;
  module.walk([&](gpu::GPUFuncOp f) {
    if (auto n = f->getAttrOfType<IntegerAttr>(mlir::smla::kOverlapRunAttr))
      most = std::max(most, n.getInt());
  });
  return most;
}

/// What the manifest records as the compiler of every kernel.
static const char *const kCompiler = "smla-compile " SMLA_COMPILER_COMMIT;

/// The configuration as compiled: `text` plus the launch keys and flags
/// that came from the command line's defaults.
static std::string effectiveSpec(llvm::StringRef text, const KernelSpec &spec) {
  std::string out = text.str();
  if (!spec.threads)
    out += ",threads=" + std::to_string(ctaThreads);
  if (!spec.ctasPerSm)
    out += ",ctas_per_sm=" + std::to_string(ctasPerSm);
  if (!useMma)
    out += " --mma=false";
  if (!prefetchKeys)
    out += " --prefetch-keys=false";
  return out;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAllPasses();
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << kCompiler << " (LLVM " LLVM_VERSION_STRING ")\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "smla kernel compiler\n");
  if (configs.empty())
    return fail("no --config given");
  if (ctaThreads < 64 || ctaThreads > 1024 || ctaThreads % 32)
    return fail("--cta-threads " + std::to_string(ctaThreads) +
                ": must be a multiple of 32 in [64, 1024]");
  if (ctasPerSm < 1 || ctasPerSm > 32)
    return fail("--ctas-per-sm " + std::to_string(ctasPerSm) +
                ": must be in [1, 32]");
  if (std::error_code ec = llvm::sys::fs::create_directories(outDir))
    return fail("cannot create output directory '" + outDir +
                "': " + ec.message());

  DialectRegistry registry;
  registry.insert<SMLADialect, smla_gpu::SMLAGPUDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  llvm::json::Array kernels;
  for (const std::string &text : configs) {
    std::string error;
    std::optional<KernelSpec> spec = parseKernelSpec(text, error);
    if (!spec)
      return fail("--config '" + text + "': " + error);
    int64_t threads = spec->threads ? spec->threads : ctaThreads;
    int64_t ctas = spec->ctasPerSm ? spec->ctasPerSm : ctasPerSm;
    if (threads * ctas > 2048)
      return fail("--config '" + text + "': " + std::to_string(ctas) +
                  " CTAs of " + std::to_string(threads) +
                  " threads cannot be resident on one SM (2048 threads)");
    // Without head_blocks, the first candidate split whose bwd kernel
    // stages both the q and the do rows (KernelSpec::headBlockCandidates).
    // A candidate other than the last may fail (its tiles do not fit in
    // shared memory): its first diagnostic becomes a note (unless --quiet)
    // and the next one is tried.
    std::vector<int64_t> splits = spec->headBlocks
                                      ? std::vector<int64_t>{spec->headBlocks}
                                      : spec->headBlockCandidates();
    OwningOpRef<ModuleOp> module;
    std::vector<KernelInfo> infos;
    for (auto [i, split] : llvm::enumerate(splits)) {
      bool last = i + 1 == splits.size();
      std::optional<ScopedDiagnosticHandler> quietProbe;
      std::string firstError;
      if (!last)
        quietProbe.emplace(&context, [&](Diagnostic &d) {
          if (firstError.empty())
            firstError = d.str();
          return success();
        });
      spec->headBlocks = split;
      module = parseSourceString<ModuleOp>(spec->source(), &context);
      if (!module)
        return fail("--config '" + text + "': the configuration was rejected");
      if (!useMma)
        (*module)->setAttr("smla.mma", BoolAttr::get(&context, false));
      PassManager kernelsPm(&context);
      if (spec->warpSpecialized)
        buildWarpSpecializedKernelPipeline(kernelsPm, spec->softmaxChunks,
                                           spec->dkvDepth);
      else
        buildGpuKernelPipeline(kernelsPm, threads, ctas, prefetchKeys,
                               spec->wgmmaScatter, spec->cluster,
                               spec->fusedEpilogue, spec->overlapChunks);
      if (failed(kernelsPm.run(*module))) {
        if (!last) {
          if (!quiet)
            llvm::errs() << "note: --config '" << text
                         << "': head_blocks=" << split
                         << " skipped: " << firstError << "\n";
          continue;
        }
        return fail("--config '" + text + "': lowering to kernels failed");
      }
      // cluster=1 asks for the two-head-block cluster (docs/wgmma-kernels.md):
      // a split it does not apply to is refused, not silently built
      // without it. So do epilogue=fused and epilogue=overlap: the
      // manifest records them, so they must hold.
      std::string why;
      using mlir::smla::kFusedEpilogueAttr, mlir::smla::kOverlapRunAttr;
      if (spec->cluster && !hasMarkedKernel(*module, "nvvm.cluster_dim"))
        why = "cluster=1 builds no cluster here: it needs the wgmma form "
              "(32-head CTAs) with an even number of head blocks per group";
      else if (spec->fusedEpilogue &&
               !hasMarkedKernel(*module, kFusedEpilogueAttr))
        why = "epilogue=fused fuses nothing here: it needs the wgmma block "
              "products of a 32-row CTA at block 64 on 512 threads";
      else if (spec->overlapChunks &&
               overlapChunksOf(*module) < spec->overlapChunks)
        why = spec->overlapChunks == 1
                  ? "epilogue=overlap found no dKV chunk to run alongside "
                    "the fused epilogue"
                  : "epilogue=overlap found fewer than " +
                        std::to_string(spec->overlapChunks) +
                        " dKV chunks (overlap_chunks) to run alongside the "
                        "fused epilogue";
      if (!why.empty()) {
        why += " (tried head_blocks=" + std::to_string(split) + ")";
        if (!last) {
          if (!quiet)
            llvm::errs() << "note: --config '" << text << "': " << why
                         << " skipped\n";
          continue;
        }
        return fail("--config '" + text + "': " + why);
      }
      infos = collectKernelInfo(*module);
      bool stagesBoth = llvm::any_of(infos, [](const KernelInfo &k) {
        return k.kind == "bwd" && k.staged.size() == 2;
      });
      if (stagesBoth)
        break;
    }
    std::string name = spec->name();
    if (emitMlir) {
      std::string s;
      llvm::raw_string_ostream os(s);
      module->print(os);
      writeFile(outDir + "/" + name + ".kernels.mlir", s);
    }
    PassManager ptxPm(&context);
    // The CUDA toolkit holding ptxas also holds libdevice (nvvm/libdevice).
    llvm::SmallString<128> cuda(ptxasPath);
    llvm::sys::path::remove_filename(cuda);
    llvm::sys::path::remove_filename(cuda);
    buildGpuToPtxPipeline(ptxPm, cuda.empty()
                                     ? llvm::StringRef("/usr/local/cuda")
                                     : llvm::StringRef(cuda));
    if (failed(ptxPm.run(*module)))
      return fail("--config '" + text + "': lowering to PTX failed");
    std::optional<std::string> ptx = extractPtx(*module);
    if (!ptx)
      return fail("--config '" + text + "': no PTX in the gpu.binary");
    if (ptx->find(".version 8.1") == std::string::npos)
      return fail("--config '" + text + "': PTX is not ISA 8.1 (+ptx81)");

    std::string ptxPath = outDir + "/" + name + ".ptx";
    std::string cubinName = name + ".cubin";
    std::string cubinPath = outDir + "/" + cubinName;
    if (!writeFile(ptxPath, *ptx))
      return fail("cannot write '" + ptxPath + "'");
    std::string log;
    if (!runPtxas(ptxasPath, ptxPath, cubinPath, log))
      return fail("--config '" + text + "': " + log);
    // When the registers ptxas chose would keep fewer bwd CTAs per SM than
    // the shared memory was sized for, assemble again with .minnctapersm.
    // (Not always: ptxas told an occupancy target tends to spend registers
    // up to its cap, e.g. 102 instead of 55 at 256 threads and 2 CTAs.)
    for (const PtxasUsage &u : parsePtxasReport(log)) {
      int64_t warps = (threads + 31) / 32;
      int64_t perWarp = llvm::alignTo(u.registers * 32, 256);
      if (ctas < 2 || !llvm::StringRef(u.entry).ends_with("_bwd") ||
          perWarp * warps * ctas <= mlir::smla::kRegistersPerSm)
        continue;
      std::optional<std::string> capped = withMinCtasPerSm(*ptx, u.entry, ctas);
      if (!capped)
        return fail("--config '" + text + "': no .maxntid for " + u.entry);
      ptx = std::move(capped);
      if (!writeFile(ptxPath, *ptx) ||
          !runPtxas(ptxasPath, ptxPath, cubinPath, log))
        return fail("--config '" + text + "': " + log);
      break;
    }
    writeFile(outDir + "/" + name + ".ptxas.txt", log);
    for (const PtxasUsage &u : parsePtxasReport(log)) {
      if (!quiet)
        llvm::outs() << u.entry << ": " << u.registers << " registers, "
                     << u.spillStores << " bytes spill stores, " << u.spillLoads
                     << " bytes spill loads\n";
      if ((u.spillStores > spec->maxSpillBytes ||
           u.spillLoads > spec->maxSpillBytes) &&
          !allowSpills)
        return fail("--config '" + text + "': kernel " + u.entry +
                    " spills registers (" + std::to_string(u.spillStores) +
                    " bytes stored, " + std::to_string(u.spillLoads) +
                    " loaded, max_spill=" +
                    std::to_string(spec->maxSpillBytes) + "; see " + name +
                    ".ptxas.txt)");
    }
    auto cubin = llvm::MemoryBuffer::getFile(cubinPath, false, false);
    if (!cubin)
      return fail("cannot read '" + cubinPath + "'");
    std::string sha = sha256Hex((*cubin)->getBuffer());

    for (const KernelInfo &k : infos) {
      llvm::json::Object entry;
      entry["name"] = k.entry;
      entry["kind"] = k.kind;
      entry["cubin"] = cubinName;
      entry["sha256"] = sha;
      entry["entry"] = k.entry;
      entry["config"] = spec->manifestConfig();
      llvm::json::Array grid;
      for (const std::string &g : k.grid) {
        int64_t v;
        if (!llvm::StringRef(g).getAsInteger(10, v))
          grid.push_back(v);
        else
          grid.push_back(g);
      }
      entry["launch"] =
          llvm::json::Object{{"block", llvm::json::Array{k.threads, 1, 1}},
                             {"grid", std::move(grid)},
                             {"dynamic_smem", k.dynamicSmem}};
      llvm::json::Array params;
      for (auto [i, p] : llvm::enumerate(k.params))
        params.push_back(llvm::json::Object{
            {"name", p},
            {"type", i < k.paramTypes.size() ? k.paramTypes[i] : "ptr"}});
      entry["params"] = std::move(params);
      entry["compiler"] = kCompiler;
      entry["spec"] = effectiveSpec(text, *spec);
      kernels.push_back(std::move(entry));
    }
    if (!quiet)
      llvm::outs() << "wrote " << cubinPath << " (" << infos.size()
                   << " kernels)\n";
  }
  llvm::json::Object manifest{
      {"format", "smla-manifest"},
      {"version", 1},
      {"target", "sm_90a"},
      {"compiler", llvm::json::Object{{"name", "smla-compile"},
                                      {"commit", SMLA_COMPILER_COMMIT},
                                      {"llvm", LLVM_VERSION_STRING}}},
      {"kernels", std::move(kernels)}};
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  if (!writeFile(outDir + "/manifest.json", s))
    return fail("cannot write the manifest");
  return 0;
}
