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
      std::set<const Chunk*> seen;
      for (size_t i = 0; i < table.size(); ++i) {
        const LeaseTable::Entry& lease = table.at(i);
        ASSERT_TRUE(seen.insert(lease.item).second);
        ASSERT_EQ(model.at(lease.item), lease.until_ms);
      }
      for (const auto& [chunk, until] : model) ASSERT_EQ(table.until(chunk), until);
    }
  }
  table.clear();
  EXPECT_TRUE(table.empty());
}

}  // namespace
}  // namespace tierkv::memory
