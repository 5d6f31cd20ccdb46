//===- KernelSpec.cpp - AOT kernel configurations -------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Target/KernelSpec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::smla;

std::vector<int64_t> KernelSpec::headBlockCandidates() const {
  int64_t hg = heads / groups;
  std::vector<int64_t> out;
  for (int64_t n = 1; n <= hg; ++n)
    if (hg % n == 0 && hg / n <= kMaxHeadsPerBlock &&
        hg / n >= std::min<int64_t>(kMinHeadsPerBlock, hg))
      out.push_back(n);
  if (out.empty()) {
    int64_t n = 1;
    while (hg % n || hg / n > kMaxHeadsPerBlock)
      ++n;
    out.push_back(n);
  }
  return out;
}

std::string KernelSpec::name() const {
  std::string split =
      headBlocks > 1 ? llvm::formatv("_s{0}", headBlocks).str() : "";
  if (tokens > 1)
    split += llvm::formatv("_t{0}", tokens).str();
  return llvm::formatv("smla_d{0}_dt{1}_h{2}_g{3}_b{4}{9}_{5}{6}_{7}_{8}", d,
                       dt, heads, groups, block, lseBase2 ? "base2" : "natural",
                       positions ? "_pos" : "", dqF32 ? "f32" : "bf16",
                       dkvF32 ? "f32" : "bf16", split)
      .str();
}

std::string KernelSpec::source() const {
  int64_t w = d + dt;
  std::string dq = dqF32 ? "f32" : "bf16";
  auto m = [](llvm::StringRef shape, llvm::StringRef elem) {
    return ("memref<" + shape + "x" + elem + ">").str();
  };
  std::string hw = llvm::formatv("?x{0}x{1}", heads, w).str();
  std::string hd = llvm::formatv("?x{0}x{1}", heads, d).str();
  std::string gw = llvm::formatv("?x{0}x{1}", groups, w).str();
  std::string idx = llvm::formatv("?x{0}x?", groups).str();
  std::string h = llvm::formatv("?x{0}", heads).str();
  std::string args, op;
  auto arg = [&](llvm::StringRef n, const std::string &type) {
    args += (args.empty() ? "" : ", ") + ("%" + n + ": " + type).str();
    op += (" " + n + "(%" + n + " : " + type + ")").str();
  };
  arg("q", m(hw, "bf16"));
  arg("kv", m(gw, "bf16"));
  arg("o", m(hd, "bf16"));
  arg("dout", m(hd, "bf16"));
  arg("indices", m(idx, "i32"));
  arg("lse", m(h, "f32"));
  if (positions)
    arg("positions", m("?", "i32"));
  arg("dq", m(hw, dq));
  arg("dkv_accum", m(gw, "f32"));
  if (!dkvF32)
    arg("dkv", m(gw, "bf16"));
  arg("counters", "memref<4xi64>");
  // The caller's Delta, when it passes one (a null pointer otherwise).
  arg("delta", m(h, "f32"));
  // Slots per token: the warp-specialized kernels walk only the blocks
  // that hold a token's slots (the caller passes K for every token when it
  // has no lengths).
  if (warpSpecialized)
    arg("topk_length", m("?", "i32"));
  std::string config = llvm::formatv(
      "#smla.config<d = {0}, dt = {1}, heads = {2}, groups = {3}, block = "
      "{4}, lseBase = {5}, positions = {6}, dqType = {7}, dkvType = {8}, "
      "headBlocks = {9}, tokens = {10}>",
      d, dt, heads, groups, block, lseBase2 ? "base2" : "natural",
      positions ? "true" : "false", dq, dkvF32 ? "f32" : "bf16", headBlocks,
      tokens);
  // The op's sm_scale is a compile-time placeholder: smla-gpu-map gives the
  // bwd kernel an f32 `sm_scale` parameter and the softmax / dscores
  // lowering reads that instead (docs/compiler.md).
  double placeholder = 1.0 / std::sqrt(double(w));
  return llvm::formatv("func.func @{0}({1}) {{\n  smla.sparse_attention_bwd"
                       "{2} {{config = {3}, sm_scale = {4:e} : f32}\n  "
                       "return\n}\n",
                       name(), args, op, config, placeholder)
      .str();
}

llvm::json::Object KernelSpec::manifestConfig() const {
  llvm::json::Object o;
  o["d"] = d;
  o["dt"] = dt;
  o["heads"] = heads;
  o["groups"] = groups;
  o["block"] = block;
  if (lseBase2)
    o["lse_base"] = 2;
  else
    o["lse_base"] = "e";
  o["positions"] = positions;
  o["dq_type"] = dqF32 ? "f32" : "bf16";
  o["dkv_type"] = dkvF32 ? "f32" : "bf16";
  o["head_blocks"] = headBlocks;
  o["tokens"] = tokens;
  if (cluster)
    o["cluster"] = true;
  if (fusedEpilogue)
    o["epilogue"] = overlapChunks ? "overlap" : "fused";
  if (overlapChunks > 1)
    o["overlap_chunks"] = overlapChunks;
  if (maxSpillBytes)
    o["max_spill"] = maxSpillBytes;
  if (warpSpecialized)
    o["schedule"] = "warp_specialized";
  if (softmaxChunks >= 0)
    o["softmax_chunks"] = softmaxChunks;
  if (dkvDepth)
    o["dkv_depth"] = dkvDepth;
  return o;
}

std::optional<KernelSpec> mlir::smla::parseKernelSpec(llvm::StringRef text,
                                                      std::string &error) {
  KernelSpec s;
  int64_t overlapKey = 0; // overlap_chunks, applied after epilogue
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  auto fail = [&](const llvm::Twine &msg) {
    error = msg.str();
    return std::nullopt;
  };
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    key = key.trim();
    value = value.trim();
    auto integer = [&](int64_t &slot) { return !value.getAsInteger(10, slot); };
    auto boolean = [&](bool &slot) {
      if (value == "1" || value == "true")
        slot = true;
      else if (value == "0" || value == "false")
        slot = false;
      else
        return false;
      return true;
    };
    auto type = [&](bool &isF32) {
      if (value != "bf16" && value != "f32")
        return false;
      isF32 = value == "f32";
      return true;
    };
    bool ok;
    if (key == "d")
      ok = integer(s.d);
    else if (key == "dt")
      ok = integer(s.dt);
    else if (key == "heads")
      ok = integer(s.heads);
    else if (key == "groups")
      ok = integer(s.groups);
    else if (key == "block")
      ok = integer(s.block);
    else if (key == "head_blocks")
      ok = integer(s.headBlocks);
    else if (key == "tokens")
      ok = integer(s.tokens) && (s.tokens == 1 || s.tokens == 2);
    else if (key == "threads")
      ok = integer(s.threads) && s.threads >= 64 && s.threads <= 1024 &&
           s.threads % 32 == 0;
    else if (key == "ctas_per_sm")
      ok = integer(s.ctasPerSm) && s.ctasPerSm >= 1 && s.ctasPerSm <= 32;
    else if (key == "positions")
      ok = boolean(s.positions);
    else if (key == "scatter") {
      ok = value == "mma" || value == "wgmma";
      s.wgmmaScatter = value == "wgmma";
    }
    else if (key == "cluster")
      ok = boolean(s.cluster);
    else if (key == "epilogue") {
      ok = value == "cta" || value == "fused" || value == "overlap";
      s.fusedEpilogue = value == "fused" || value == "overlap";
      s.overlapChunks = value == "overlap" ? 1 : 0;
    }
    else if (key == "schedule") {
      ok = value == "cta" || value == "warp_specialized";
      s.warpSpecialized = value == "warp_specialized";
    }
    else if (key == "softmax_chunks")
      ok = integer(s.softmaxChunks) && s.softmaxChunks >= 0 &&
           s.softmaxChunks <= 16;
    else if (key == "dkv_depth")
      ok = integer(s.dkvDepth) && (s.dkvDepth == 1 || s.dkvDepth == 2);
    else if (key == "overlap_chunks")
      ok = integer(overlapKey) && (overlapKey == 1 || overlapKey == 2);
    else if (key == "max_spill")
      ok = integer(s.maxSpillBytes) && s.maxSpillBytes >= 0 &&
           s.maxSpillBytes <= 512;
    else if (key == "dq")
      ok = type(s.dqF32);
    else if (key == "dkv")
      ok = type(s.dkvF32);
    else if (key == "sm_scale")
      return fail("sm_scale is not a compile-time setting: the bwd kernel "
                  "takes it as its f32 'sm_scale' parameter");
    else if (key == "lse") {
      ok = value == "base2" || value == "natural" || value == "2" ||
           value == "e";
      s.lseBase2 = value == "base2" || value == "2";
    } else
      return fail("unknown configuration key '" + key +
                  "' (expected d, dt, heads, groups, block, head_blocks, "
                  "tokens, lse, positions, dq, dkv, threads, ctas_per_sm, "
                  "scatter, cluster, epilogue, overlap_chunks, max_spill, schedule, softmax_chunks, "
                  "dkv_depth)");
    if (!ok)
      return fail("bad value '" + value + "' for configuration key '" + key +
                  "'");
  }
  if (overlapKey) {
    if (!s.overlapChunks)
      return fail("overlap_chunks needs epilogue=overlap");
    s.overlapChunks = overlapKey;
  }
  if (s.d < 16 || s.d % 16)
    return fail("d must be a positive multiple of 16, got " + llvm::Twine(s.d));
  if (s.dt < 0 || s.dt % 16)
    return fail("dt must be a multiple of 16, got " + llvm::Twine(s.dt));
  if (s.heads < 1 || s.groups < 1 || s.heads % s.groups)
    return fail("heads (" + llvm::Twine(s.heads) +
                ") must be a positive multiple of groups (" +
                llvm::Twine(s.groups) + ")");
  if (s.block < 16 || s.block > 256 || s.block % 16)
    return fail("block must be a multiple of 16 in [16, 256], got " +
                llvm::Twine(s.block));
  int64_t hg = s.heads / s.groups;
  if (s.headBlocks < 0 || (s.headBlocks > 0 && hg % s.headBlocks)) {
    return fail("head_blocks (" + llvm::Twine(s.headBlocks) +
                ") must divide the heads per group (" + llvm::Twine(hg) + ")");
  }
  if (s.tokens > 1 &&
      (s.groups != 1 || s.headBlocks > 1 || s.heads % s.tokens))
    return fail("tokens = " + llvm::Twine(s.tokens) +
                " needs groups = 1, head_blocks <= 1 and heads divisible by "
                "tokens");
  if (s.cluster && (!s.wgmmaScatter || s.tokens > 1))
    return fail("cluster = 1 needs scatter = wgmma and tokens = 1 (it "
                "pairs head blocks of a token)");
  if (s.fusedEpilogue && !s.wgmmaScatter)
    return fail("epilogue = fused needs scatter = wgmma (it runs in the "
                "wgmma block products' warpgroup)");
  if ((s.softmaxChunks >= 0 || s.dkvDepth) && !s.warpSpecialized)
    return fail("softmax_chunks and dkv_depth need schedule = "
                "warp_specialized");
  if (s.warpSpecialized) {
    if (s.block != 64 || hg % 64 || s.tokens != 1 || s.wgmmaScatter ||
        s.cluster || s.fusedEpilogue ||
        (s.headBlocks && s.headBlocks != hg / 64) ||
        (s.threads && s.threads != 384))
      return fail("schedule = warp_specialized needs block = 64, 64 heads "
                  "per CTA (heads / groups a multiple of 64), tokens = 1, "
                  "384 threads and none of scatter, cluster or epilogue");
    s.headBlocks = hg / 64;
    s.threads = 384;
    s.ctasPerSm = 1;
  }
  if (s.tokens > 1)
    s.headBlocks = 1;
  return s;
}
