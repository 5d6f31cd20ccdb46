//===- Cubin.cpp - PTX out of gpu.binary, ptxas, cubin hashes -------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/SMLAToNVVM.h"
#include "smla/Target/KernelSpec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/SHA256.h"

using namespace mlir;
using namespace mlir::smla;

std::vector<KernelInfo> mlir::smla::collectKernelInfo(ModuleOp module) {
  std::vector<KernelInfo> out;
  module.walk([&](gpu::GPUFuncOp func) {
    if (!func.isKernel())
      return;
    KernelInfo k;
    k.entry = func.getName().str();
    if (auto kind = func->getAttrOfType<StringAttr>(kKernelKindAttr))
      k.kind = kind.str();
    if (auto params = func->getAttrOfType<ArrayAttr>(kParamNamesAttr))
      for (Attribute a : params)
        k.params.push_back(cast<StringAttr>(a).str());
    for (Type t : func.getArgumentTypes())
      k.paramTypes.push_back(isa<MemRefType>(t) ? "ptr"
                             : t.isF32()        ? "f32"
                                                : "i32");
    if (auto grid = func->getAttrOfType<ArrayAttr>(kGridAttr))
      for (Attribute a : grid)
        k.grid.push_back(cast<StringAttr>(a).str());
    if (auto block = func.getKnownBlockSize())
      k.threads = (*block)[0];
    if (auto smem = func->getAttrOfType<IntegerAttr>(kDynamicSmemAttr))
      k.dynamicSmem = smem.getInt();
    if (auto staged = func->getAttrOfType<ArrayAttr>(kStagedAttr))
      for (Attribute a : staged)
        k.staged.push_back(cast<StringAttr>(a).str());
    out.push_back(std::move(k));
  });
  return out;
}

std::optional<std::string> mlir::smla::extractPtx(ModuleOp module) {
  std::optional<std::string> ptx;
  module.walk([&](gpu::BinaryOp binary) {
    for (Attribute a : binary.getObjects())
      if (auto object = dyn_cast<gpu::ObjectAttr>(a)) {
        ptx = object.getObject().str();
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  return ptx;
}

std::vector<PtxasUsage> mlir::smla::parsePtxasReport(llvm::StringRef log) {
  std::vector<PtxasUsage> out;
  llvm::Regex entry("Function properties for ([A-Za-z0-9_]+)");
  llvm::Regex frame("([0-9]+) bytes stack frame, ([0-9]+) bytes spill "
                    "stores, ([0-9]+) bytes spill loads");
  llvm::Regex regs("Used ([0-9]+) registers");
  llvm::SmallVector<llvm::StringRef> lines;
  log.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef> m;
    if (entry.match(line, &m)) {
      out.push_back({m[1].str()});
    } else if (!out.empty() && frame.match(line, &m)) {
      m[1].getAsInteger(10, out.back().stackFrame);
      m[2].getAsInteger(10, out.back().spillStores);
      m[3].getAsInteger(10, out.back().spillLoads);
    } else if (!out.empty() && regs.match(line, &m)) {
      m[1].getAsInteger(10, out.back().registers);
    }
  }
  return out;
}

bool mlir::smla::runPtxas(llvm::StringRef ptxas, llvm::StringRef ptxPath,
                          llvm::StringRef cubinPath, std::string &log) {
  if (!llvm::sys::fs::can_execute(ptxas)) {
    log = ("ptxas not found or not executable at '" + ptxas + "' (set --ptxas)")
              .str();
    return false;
  }
  llvm::SmallString<128> logPath;
  if (llvm::sys::fs::createTemporaryFile("smla-ptxas", "txt", logPath)) {
    log = "cannot create a temporary file for the ptxas log";
    return false;
  }
  llvm::StringRef args[] = {ptxas,   "-arch=sm_90a", "-v",
                            ptxPath, "-o",           cubinPath};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(),
                                                logPath.str()};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                     &error);
  if (auto buffer = llvm::MemoryBuffer::getFile(logPath))
    log = (*buffer)->getBuffer().str();
  llvm::sys::fs::remove(logPath);
  if (rc != 0) {
    log =
        "ptxas failed (exit " + std::to_string(rc) + ") " + error + "\n" + log;
    return false;
  }
  return true;
}

std::optional<std::string> mlir::smla::withMinCtasPerSm(llvm::StringRef ptx,
                                                       llvm::StringRef entry,
                                                       int64_t ctas) {
  size_t at = ptx.find((".entry " + entry + "(").str());
  if (at == llvm::StringRef::npos)
    return std::nullopt;
  size_t maxntid = ptx.find(".maxntid", at);
  size_t body = ptx.find('{', at);
  if (maxntid == llvm::StringRef::npos || maxntid > body)
    return std::nullopt;
  size_t eol = ptx.find('\n', maxntid);
  if (eol == llvm::StringRef::npos)
    return std::nullopt;
  return (ptx.take_front(eol + 1) + ".minnctapersm " + std::to_string(ctas) +
          "\n" + ptx.drop_front(eol + 1))
      .str();
}

std::string mlir::smla::sha256Hex(llvm::StringRef bytes) {
  std::array<uint8_t, 32> hash = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
  return llvm::toHex(hash, /*LowerCase=*/true);
}
