// DeadlineTable (as LeaseTable) against a std::map model: seeded random sets, ends and
// removals; every lease the model holds is found with its end, sampling by
// position sees each lease once, and removal of an absent chunk is a no-op.
#include "memory/deadline_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "memory/chunk.h"

namespace tierkv::memory {
namespace {

TEST(DeadlineTableTest, MatchesAModelUnderRandomOperations) {
  std::vector<Chunk> chunks(64);
  LeaseTable table;
  std::map<const Chunk*, int64_t> model;
  std::mt19937_64 rng(20261205);
  for (int step = 0; step < 20'000; ++step) {
    Chunk* c = &chunks[rng() % chunks.size()];
    if (rng() % 3 != 0) {
      const auto until = static_cast<int64_t>(rng() % 1'000'000);
      table.set(c, until);
      model[c] = until;
    } else {
      table.remove(c);
      model.erase(c);
    }
    ASSERT_EQ(table.size(), model.size()) << "step " << step;
    if (step % 97 == 0) {
      size_t seen = 0;
      table.for_each([&](const Chunk* c, int64_t until) {
        ASSERT_EQ(model.at(c), until);
        ++seen;
      });
      ASSERT_EQ(seen, model.size());
      for (const auto& [chunk, until] : model) ASSERT_EQ(table.until(chunk), until);
    }
  }
  table.clear();
  EXPECT_TRUE(table.empty());
}

// Sampling: each sample holds distinct entries with their ends, and
// samples taken in turn reach every entry within size() / n + 1 samples,
// also while entries (the cursor's among them) are removed between them.
TEST(DeadlineTableTest, SamplesInTurnReachEveryEntry) {
  std::vector<Chunk> chunks(200);
  LeaseTable table;
  std::mt19937_64 rng(20261207);
  for (size_t i = 0; i < chunks.size(); ++i) table.set(&chunks[i], static_cast<int64_t>(i));
  EXPECT_TRUE(LeaseTable().sample(20).empty());
  std::set<const Chunk*> reached;
  for (int round = 0; round < 12; ++round) {
    LeaseTable::Sample s = table.sample(20);
    ASSERT_EQ(s.size(), std::min<size_t>(20, table.size()));
    std::set<const Chunk*> distinct;
    for (const LeaseTable::Entry& e : s) {
      ASSERT_TRUE(distinct.insert(e.item).second);
      ASSERT_EQ(e.until_ms, e.item - chunks.data());
      reached.insert(e.item);
    }
    // Remove a few, the last one sampled (the cursor's neighbour) among them.
    table.remove(s.back().item);
    reached.insert(s.back().item);
    for (int k = 0; k < 3; ++k) {
      const Chunk* c = &chunks[rng() % chunks.size()];
      if (!reached.count(c) && table.find(c)) {
        table.remove(c);
        reached.insert(c);
      }
    }
  }
  EXPECT_EQ(reached.size(), chunks.size()) << "every entry is sampled or removed within 12 rounds";
}

}  // namespace
}  // namespace tierkv::memory
