#include "smla/runtime/Launcher.h"
#include "smla/runtime/Error.h"
#include <chrono>
#include <cstdio>
using namespace smla::runtime;
using clk = std::chrono::steady_clock;
int main(int argc, char **argv) {
  KernelLibrary lib = KernelLibrary::fromDirectory(argv[1]);
  printf("%zu kernels\n", lib.manifest().kernels.size());
  auto req = [](int64_t h, int64_t tokens) {
    KernelRequest r; r.kind = "bwd"; r.d = 512; r.dt = 64; r.heads = h; r.groups = 1;
    r.lseBase = LseBase::Two; r.positions = false; r.dqType = "bf16"; r.dkvType = "bf16"; r.tokens = tokens;
    return r;
  };
  auto time = [&](const char *what, auto fn) {
    const int n = 2000;
    auto t0 = clk::now();
    for (int i = 0; i < n; ++i) fn();
    double us = std::chrono::duration<double, std::micro>(clk::now() - t0).count() / n;
    printf("%-40s %8.2f us\n", what, us);
  };
  time("select h64 tokens1 (hit)", [&] { (void)lib.select(req(64, 1)); });
  time("select h128 tokens1 (hit)", [&] { (void)lib.select(req(128, 1)); });
  time("select h32 tokens2 (hit)", [&] { (void)lib.select(req(32, 2)); });
  time("select h128 tokens2 (miss, throws)", [&] { try { (void)lib.select(req(128, 2)); } catch (const Error &) {} });
  const Manifest &man = lib.manifest();
  time("match h64 tokens1 (hit)", [&] { (void)man.match(req(64, 1)); });
  time("match h128 tokens2 (miss)", [&] { (void)man.match(req(128, 2)); });
  const KernelEntry &k = lib.select(req(64, 1));
  ParamValues v;
  time("ParamValues map of 21", [&] {
    ParamValues p{{"q", ParamValue::ptr(nullptr)}, {"kv", ParamValue::ptr(nullptr)}, {"o", ParamValue::ptr(nullptr)},
      {"dout", ParamValue::ptr(nullptr)}, {"do", ParamValue::ptr(nullptr)}, {"indices", ParamValue::ptr(nullptr)},
      {"lse", ParamValue::ptr(nullptr)}, {"positions", ParamValue::ptr(nullptr)}, {"q_positions", ParamValue::ptr(nullptr)},
      {"dq", ParamValue::ptr(nullptr)}, {"dkv_accum", ParamValue::ptr(nullptr)}, {"dkv", ParamValue::ptr(nullptr)},
      {"counters", ParamValue::ptr(nullptr)}, {"delta", ParamValue::ptr(nullptr)}, {"T", ParamValue::i32(1)},
      {"S_kv", ParamValue::i32(1)}, {"K", ParamValue::i32(1)}, {"H", ParamValue::i32(1)}, {"G", ParamValue::i32(1)},
      {"sm_scale", ParamValue::f32(1)}, {"walk_period", ParamValue::i32(0)}};
    v = p;
  });
  time("packParams", [&] { (void)packParams(k, v); });
  time("launchGeometry", [&] { (void)launchGeometry(k, GridSizes{4096, 8192, 2048, 64, 1}); });
}
