"""Kernel timeline of one compiled call (torch.profiler): name, start, duration."""
import sys, torch
sys.path.insert(0, "bench"); sys.path.insert(0, "python")
import bench_bwd as bb
from torch.profiler import profile, ProfilerActivity
name = sys.argv[1]
p = bb.make_problem(bb.SHAPES[name], torch.device("cuda"))
ns = type("A", (), {"no_compile": True, "tilelang": None})()
f = bb.backends(p, ns)["compiled"]
for _ in range(3): f()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    f(); torch.cuda.synchronize()
ev = sorted([e for e in prof.events() if e.device_type.name == "CUDA"], key=lambda e: e.time_range.start)
t0 = ev[0].time_range.start
for e in ev:
    print(f"{name} {e.time_range.start - t0:9.1f} us +{e.time_range.elapsed_us():9.1f} us  {e.name[:90]}")
