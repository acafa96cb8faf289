#include "cli/trace/belady.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace tierkv::trace {
namespace {

// The fewest misses any replacement can achieve, by trying every choice:
// which resident to evict on a miss, and (with bypass) whether to insert.
class BruteForce {
 public:
  BruteForce(const std::vector<uint64_t>& seq, size_t capacity, bool bypass)
      : seq_(seq), capacity_(capacity), bypass_(bypass) {}

  uint64_t misses() { return solve(0, {}); }

 private:
  uint64_t solve(size_t i, const std::set<uint64_t>& cache) {
    if (i == seq_.size()) return 0;
    auto key = std::make_pair(i, cache);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    uint64_t best;
    uint64_t x = seq_[i];
    if (cache.count(x)) {
      best = solve(i + 1, cache);
    } else {
      best = UINT64_MAX;
      if (bypass_) best = solve(i + 1, cache);
      if (cache.size() < capacity_) {
        std::set<uint64_t> next = cache;
        next.insert(x);
        best = std::min(best, solve(i + 1, next));
      } else {
        for (uint64_t victim : cache) {
          std::set<uint64_t> next = cache;
          next.erase(victim);
          next.insert(x);
          best = std::min(best, solve(i + 1, next));
        }
      }
      best += 1;
    }
    memo_[key] = best;
    return best;
  }

  const std::vector<uint64_t>& seq_;
  size_t capacity_;
  bool bypass_;
  std::map<std::pair<size_t, std::set<uint64_t>>, uint64_t> memo_;
};

TEST(Belady, TextbookReferenceString) {
  // The classic example: 12 references, 3 frames, 7 faults under OPT.
  DenseTrace t = densify({1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5});
  EXPECT_EQ(belady_min_misses(t, 3), 7u);
  EXPECT_EQ(belady_min_misses(t, 4), 6u);
}

TEST(Belady, NextUseIndices) {
  DenseTrace t = densify({7, 8, 7, 9, 8});
  EXPECT_EQ(t.ids, (std::vector<uint32_t>{0, 1, 0, 2, 1}));
  EXPECT_EQ(t.keys, (std::vector<uint64_t>{7, 8, 9}));
  EXPECT_EQ(t.next_use, (std::vector<uint32_t>{2, 4, 5, 5, 5}));
}

TEST(Belady, MatchesBruteForceOnRandomSequences) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 300; ++round) {
    size_t length = 1 + rng() % 14;
    uint64_t alphabet = 1 + rng() % 6;
    std::vector<uint64_t> seq(length);
    for (uint64_t& x : seq) x = rng() % alphabet;
    DenseTrace t = densify(seq);
    for (size_t capacity = 1; capacity <= 4; ++capacity) {
      uint64_t min = belady_min_misses(t, capacity);
      uint64_t opt = belady_opt_misses(t, capacity);
      EXPECT_EQ(min, BruteForce(seq, capacity, false).misses())
          << "round " << round << " c=" << capacity;
      EXPECT_EQ(opt, BruteForce(seq, capacity, true).misses())
          << "round " << round << " c=" << capacity;
      EXPECT_LE(opt, min);
      EXPECT_GE(opt, t.unique());  // compulsory misses are counted
    }
  }
}

TEST(Belady, BypassBeatsMinOnAScan) {
  // A loop of 3 through 2 slots: MIN must insert every newcomer; OPT keeps
  // two of them and lets the third pass.
  std::vector<uint64_t> seq;
  for (int r = 0; r < 10; ++r) {
    for (uint64_t x : {1, 2, 3}) seq.push_back(x);
  }
  DenseTrace t = densify(seq);
  EXPECT_EQ(belady_opt_misses(t, 2), 3u + 9u);  // compulsory, then one per loop
  EXPECT_GT(belady_min_misses(t, 2), belady_opt_misses(t, 2));
}

TEST(Belady, LargeCacheHasOnlyCompulsoryMisses) {
  std::mt19937 rng(7);
  std::vector<uint64_t> seq(5000);
  for (uint64_t& x : seq) x = rng() % 300;
  DenseTrace t = densify(seq);
  EXPECT_EQ(belady_min_misses(t, t.unique()), t.unique());
  EXPECT_EQ(belady_min_misses(t, 0), seq.size());
  // More room never hurts MIN (no Belady anomaly for stack algorithms).
  uint64_t prev = UINT64_MAX;
  for (size_t c : {10, 20, 40, 80, 160}) {
    uint64_t m = belady_min_misses(t, c);
    EXPECT_LE(m, prev);
    prev = m;
  }
}

}  // namespace
}  // namespace tierkv::trace
