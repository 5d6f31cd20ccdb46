"""Host cost of one compiled call: enqueue time with the GPU busy, back-to-back
GPU time per call against the harness's synchronous time, and the CPU-side
profile (aten ops, driver calls) of one call."""
import sys, time, statistics, torch
sys.path.insert(0, "bench"); sys.path.insert(0, "python")
import bench_bwd as bb
from torch.profiler import profile, ProfilerActivity
name = sys.argv[1]
dev = torch.device("cuda")
p = bb.make_problem(bb.SHAPES[name], dev)
ns = type("A", (), {"no_compile": True, "tilelang": None})()
f = bb.backends(p, ns)["compiled"]
for _ in range(3): f()
torch.cuda.synchronize()
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
host = []
for _ in range(15):
    for _ in range(40): a @ a          # ~50 ms of queued GPU work
    t0 = time.perf_counter(); f(); host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
print(f"{name}: host enqueue per call (GPU busy) median {statistics.median(host):.0f} us, min {min(host):.0f}")
sync = bb.bench(f, dev, 2, 15)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for _ in range(40): a @ a
e0.record()
for _ in range(10): f()
e1.record(); e1.synchronize()
print(f"{name}: synchronous (harness) {sync:.3f} ms, back-to-back {e0.elapsed_time(e1) / 10:.3f} ms per call")
torch.cuda.synchronize()
if sys.argv[2:] != ["profile"]:
    sys.exit(0)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    f(); torch.cuda.synchronize()
ev = sorted(prof.events(), key=lambda e: e.time_range.start)
t0 = ev[0].time_range.start
for e in ev:
    print(f"{name} {e.device_type.name[:4]} {e.time_range.start - t0:9.1f} +{e.time_range.elapsed_us():8.1f}  {e.name[:100]}")
