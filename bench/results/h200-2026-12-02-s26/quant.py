"""Wave quantization probe: compiled time at B1/B2 and at T chosen so the
CTA count is a whole number of waves. Usage: quant.py NAME T [NAME T ...]"""
import sys, torch
sys.path.insert(0, "bench"); sys.path.insert(0, "python")
import bench_bwd as bb
args = sys.argv[1:]
for name, T in zip(args[0::2], args[1::2]):
    T = int(T)
    spec = (T,) + bb.SHAPES[name][1:]
    p = bb.make_problem(spec, torch.device("cuda"))
    copies = [p] + [{k: v.clone() if torch.is_tensor(v) else v for k, v in p.items()} for _ in range(2)]
    ns = type("A", (), {"no_compile": True, "tilelang": None})()
    runs = [bb.backends(c, ns)["compiled"] for c in copies]
    ms = bb.bench(runs, torch.device("cuda"), 3, 15)
    print(f"{name} T={T}: {ms:.3f} ms, {ms / T * 1e3:.4f} us/token", flush=True)
    del p, copies, runs
    torch.cuda.empty_cache()
