"""How much of the harness's synchronous time is the host: the same call
timed as bench_bwd.py does (GPU idle when the call starts) and with the
host's work hidden behind a GPU sleep queued first (timed from the end of
the sleep). Usage: hidden.py SHAPE..."""
import sys, statistics, torch
sys.path.insert(0, "bench"); sys.path.insert(0, "python")
import bench_bwd as bb
dev = torch.device("cuda")
for name in sys.argv[1:]:
    p = bb.make_problem(bb.SHAPES[name], dev)
    copies = [p] + [{k: v.clone() if torch.is_tensor(v) else v for k, v in p.items()} for _ in range(2)]
    ns = type("A", (), {"no_compile": True, "tilelang": None})()
    fns = [bb.backends(c, ns)["compiled"] for c in copies]
    for f in fns: f()
    torch.cuda.synchronize()
    sync, hidden = [], []
    for i in range(30):
        f = fns[i % 3]
        a, c, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        if i % 2:
            a.record(); f(); b.record(); b.synchronize(); sync.append(a.elapsed_time(b))
        else:
            torch.cuda._sleep(3_000_000)  # ~1.5-2 ms of GPU time, longer than the host's enqueue
            c.record(); f(); b.record(); b.synchronize(); hidden.append(c.elapsed_time(b))
    s, h = statistics.median(sync), statistics.median(hidden)
    print(f"{name}: synchronous {s:.3f} ms, host hidden {h:.3f} ms, exposed host {1e3 * (s - h):.0f} us ({s / h:.4f}x)", flush=True)
    del p, copies, fns
    torch.cuda.empty_cache()
