import sys, torch, heapq, time
sys.path.insert(0, "python")
from smla.indices import dsa_like, causal_random
T, S, K = 8192, 32768, 2048
t0 = time.time()
idx = dsa_like(T, S, K, seed=0)[:, 0]
print("indices", time.time() - t0, "s")
a, b = idx[0::2], idx[1::2]
lens = []
for i in range(T // 2):
    u = torch.unique(torch.cat([a[i][a[i] >= 0], b[i][b[i] >= 0]]))
    lens.append(u.numel())
lens = torch.tensor(lens)
print("pair union mean", lens.float().mean().item(), "min", lens.min().item(), "max", lens.max().item(),
      "std", lens.float().std().item())
steps = (lens + 63) // 64
print("steps min/mean/max", steps.min().item(), steps.float().mean().item(), steps.max().item())
torch.save(lens, "scratch/s26/b2_pair_lens.pt")
def sim(order, overhead, sms=132):
    heap = [0.0] * sms
    for i in order:
        t = heapq.heappop(heap)
        heapq.heappush(heap, t + overhead + steps[i].item())
    return max(heap), sum(heap) / sms
n = T // 2
for ov in (1.0, 2.0, 3.0):
    given = sim(range(n), ov)
    lpt = sim(torch.argsort(steps, descending=True, stable=True).tolist(), ov)
    ideal = (steps.sum().item() + n * ov) / 132
    print(f"overhead {ov} steps: given {given[0]:.1f}, LPT {lpt[0]:.1f}, ideal {ideal:.1f}; given/LPT {given[0]/lpt[0]:.4f}, given/ideal {given[0]/ideal:.4f}")
