// Host side of bench/deterministic_dkv.cu: seeded top-k indices (the model of
// python/smla/indices.py, restated in C++ so the probe needs no Python), their
// key-sharing statistics, the grouping of tokens into sources whose rows are
// summed on chip, and the chunking of a partial-row workspace.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

namespace ddkv {

constexpr int kBlock = 64;  // rows per block: a bwd CTA's key block

inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
inline uint32_t hash4(uint32_t seed, uint32_t kind, uint32_t a, uint32_t b) {
  return mix32(mix32(mix32(seed * 0x9E3779B1u + kind) ^ a) + b * 0x85EBCA77u);
}
// Irwin-Hall of four uniforms, rescaled to unit variance: close enough to
// N(0,1) for a score model, and cheap.
inline float normalish(uint32_t h) {
  float s = 0;
  for (int i = 0; i < 4; ++i) s += (float)(mix32(h + 0x9E3779B9u * (i + 1)) >> 8) * (1.0f / 16777216.0f);
  return (s - 2.0f) * 1.7320508f;
}

struct IndexSet {
  int T, S, K;
  bool dsa;
  std::vector<int> idx;  // [T][K], -1 pads
  double nextOverlap = 0, union8 = 0, union64 = 0;
};

// Query t sits at kv position S - T + t and picks K keys <= its position.
// dsa: key j scores s_j + sigma*e_j(t) + b*n_tj (salience, drift between
// anchors every L positions, fresh noise); the W most recent keys are always
// taken (most recent first), the rest go to the highest scores. random: K
// distinct keys uniformly (the top K of uniform scores). Slots are emitted in
// the indexer's order (window, then score descending).
inline IndexSet makeIndices(int T, int S, int K, bool dsa, uint32_t seed) {
  const float sigma = 1.0f, b = 0.25f;
  const int L = 128, Wn = 128;
  IndexSet is{T, S, K, dsa, std::vector<int>((size_t)T * K, -1)};
  int aLo = (S - T) / L, aHi = (S - 1) / L + 1;
  std::vector<float> sal(S), anchors((size_t)(aHi - aLo + 1) * S);
  for (int j = 0; j < S; ++j) sal[j] = normalish(hash4(seed, 1, j, 0));
#pragma omp parallel for schedule(static)
  for (int a = aLo; a <= aHi; ++a)
    for (int j = 0; j < S; ++j) anchors[(size_t)(a - aLo) * S + j] = normalish(hash4(seed, 2, a, j));
#pragma omp parallel
  {
    std::vector<std::pair<float, int>> cand;
#pragma omp for schedule(dynamic, 16)
    for (int t = 0; t < T; ++t) {
      int pos = S - T + t, n = 0;
      int* out = &is.idx[(size_t)t * K];
      int w = dsa ? std::min(Wn, pos + 1) : 0;
      for (int k = 0; k < w && n < K; ++k) out[n++] = pos - k;
      int a = pos / L - aLo;
      float f = (float)(pos % L) / L;
      cand.clear();
      for (int j = 0; j <= pos - w; ++j) {
        float sc;
        if (dsa) {
          float drift = (1 - f) * anchors[(size_t)a * S + j] + f * anchors[(size_t)(a + 1) * S + j];
          sc = sal[j] + sigma * drift + b * normalish(hash4(seed, 3, t, j));
        } else {
          sc = (float)mix32(hash4(seed, 4, t, j));
        }
        cand.push_back({sc, j});
      }
      int take = std::min<int>(K - n, (int)cand.size());
      auto gt = [](const std::pair<float, int>& x, const std::pair<float, int>& y) {
        return x.first > y.first || (x.first == y.first && x.second < y.second);
      };
      if (take < (int)cand.size()) std::nth_element(cand.begin(), cand.begin() + take, cand.end(), gt);
      std::sort(cand.begin(), cand.begin() + take, gt);
      for (int k = 0; k < take; ++k) out[n++] = cand[k].second;
    }
  }
  // Key sharing (BENCHMARKS.md asks for it next to every figure).
  double ov = 0, un8 = 0, un64 = 0;
  long ovN = 0, n8 = 0, n64 = 0;
#pragma omp parallel reduction(+ : ov, un8, un64, ovN, n8, n64)
  {
    std::vector<int> stamp(S, -1);
#pragma omp for schedule(static)
    for (int t = 0; t < T - 1; ++t) {
      int cnt = 0, inter = 0;
      for (int k = 0; k < K; ++k)
        if (int key = is.idx[(size_t)t * K + k]; key >= 0) stamp[key] = t, ++cnt;
      for (int k = 0; k < K; ++k)
        if (int key = is.idx[(size_t)(t + 1) * K + k]; key >= 0 && stamp[key] == t) ++inter;
      if (cnt) ov += (double)inter / cnt, ++ovN;
    }
    std::fill(stamp.begin(), stamp.end(), -1);
    for (int bs : {8, 64}) {
#pragma omp for schedule(static)
      for (int g = 0; g < T / bs; ++g) {
        int u = 0, tag = g + (bs == 64 ? T : 0);
        for (int t = g * bs; t < (g + 1) * bs; ++t)
          for (int k = 0; k < K; ++k)
            if (int key = is.idx[(size_t)t * K + k]; key >= 0 && stamp[key] != tag) stamp[key] = tag, ++u;
        (bs == 8 ? un8 : un64) += (double)u / K;
        ++(bs == 8 ? n8 : n64);
      }
    }
  }
  is.nextOverlap = ovN ? ov / ovN : NAN;
  is.union8 = n8 ? un8 / n8 : NAN;
  is.union64 = n64 ? un64 / n64 : NAN;
  return is;
}

// The rows one call reduces: sources (a token, or a group of G consecutive
// tokens whose rows a CTA sums on chip first: one row per key of their
// union), each cut into blocks of 64 rows (-1 pads).
struct Work {
  int S, G, nSrc, nBlocks;
  std::vector<int> keys;      // [nBlocks * 64]
  std::vector<int> blockSrc;  // [nBlocks]
  std::vector<int> srcBlock;  // [nSrc + 1]: first block of each source
  std::vector<int> cnt;       // rows per key
  std::vector<int> csrOff, csrSrc;  // per key, its sources in row order (the reference)
  long valid = 0;
};

inline Work groupRows(const IndexSet& is, int G) {
  Work w;
  w.S = is.S, w.G = G, w.nSrc = (is.T + G - 1) / G, w.nBlocks = 0;
  std::vector<int> stamp(is.S, -1), u;
  w.srcBlock.push_back(0);
  for (int s = 0; s < w.nSrc; ++s) {
    u.clear();
    for (int t = s * G; t < std::min(is.T, (s + 1) * G); ++t)
      for (int k = 0; k < is.K; ++k) {
        int key = is.idx[(size_t)t * is.K + k];
        if (G == 1) u.push_back(key);  // slot order, padding kept
        else if (key >= 0 && stamp[key] != s) stamp[key] = s, u.push_back(key);
      }
    if (G > 1) std::sort(u.begin(), u.end());
    while (u.size() % kBlock) u.push_back(-1);
    for (size_t i = 0; i < u.size(); i += kBlock) w.blockSrc.push_back(s);
    w.keys.insert(w.keys.end(), u.begin(), u.end());
    w.srcBlock.push_back((int)w.blockSrc.size());
  }
  w.nBlocks = (int)w.blockSrc.size();
  w.cnt.assign(is.S, 0);
  for (size_t e = 0; e < w.keys.size(); ++e)
    if (w.keys[e] >= 0) ++w.cnt[w.keys[e]], ++w.valid;
  w.csrOff.assign(is.S + 1, 0);
  for (int k = 0; k < is.S; ++k) w.csrOff[k + 1] = w.csrOff[k] + w.cnt[k];
  w.csrSrc.resize(w.valid);
  std::vector<int> fill(w.csrOff.begin(), w.csrOff.end() - 1);
  for (size_t e = 0; e < w.keys.size(); ++e)
    if (int key = w.keys[e]; key >= 0) w.csrSrc[fill[key]++] = w.blockSrc[e / kBlock];
  return w;
}

// Sources cut into consecutive chunks whose valid rows fit a workspace of
// wsRows rows (the partial-row design folds one chunk before the next).
struct Chunks {
  std::vector<int> blockStart;    // [n + 1]
  std::vector<int> validBefore;   // [n]: valid rows of earlier chunks
  std::vector<int> chunkOfBlock;  // [nBlocks]
  long maxRows = 0;
  int n() const { return (int)validBefore.size(); }
};

inline bool makeChunks(const Work& w, long wsRows, Chunks& c) {
  c = Chunks{};
  std::vector<long> srcValid(w.nSrc, 0);
  for (int s = 0; s < w.nSrc; ++s)
    for (int e = w.srcBlock[s] * kBlock; e < w.srcBlock[s + 1] * kBlock; ++e) srcValid[s] += w.keys[e] >= 0;
  long rows = 0, before = 0;
  c.blockStart.push_back(0);
  c.validBefore.push_back(0);
  for (int s = 0; s < w.nSrc; ++s) {
    if (srcValid[s] > wsRows) return false;
    if (rows + srcValid[s] > wsRows) {
      c.blockStart.push_back(w.srcBlock[s]);
      before += rows;
      c.validBefore.push_back((int)before);
      rows = 0;
    }
    rows += srcValid[s];
    c.maxRows = std::max(c.maxRows, rows);
  }
  c.blockStart.push_back(w.nBlocks);
  c.chunkOfBlock.resize(w.nBlocks);
  for (int i = 0; i < c.n(); ++i)
    for (int b = c.blockStart[i]; b < c.blockStart[i + 1]; ++b) c.chunkOfBlock[b] = i;
  return true;
}

}  // namespace ddkv
