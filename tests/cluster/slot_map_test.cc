// SlotMap's contract: the JSON form round-trips and a map that breaks an
// invariant is refused with a reason; balanced_owners() gives every node its
// weighted share and moves only surplus slots, checked against a model over
// seeded random joins, leaves and weight changes.
#include "cluster/slot_map.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tierkv::cluster {
namespace {

SlotMap three_nodes() {
  SlotMap map;
  map.set_version(3);
  for (int i = 1; i <= 3; ++i)
    map.upsert_node({"n" + std::to_string(i), "127.0.0.1", static_cast<uint16_t>(7000 + i), 1});
  const std::vector<size_t> owners = balanced_owners(map);
  for (uint32_t s = 0; s < kSlotCount; ++s) map.set_owner(static_cast<uint16_t>(s), owners[s]);
  return map;
}

TEST(SlotMapTest, JsonRoundTrips) {
  SlotMap map = three_nodes();
  map.set_moving(5, 2);
  Result<SlotMap> back = SlotMap::from_json(map.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->version(), 3u);
  EXPECT_EQ(back->nodes(), map.nodes());
  EXPECT_EQ(back->ranges(), map.ranges());
  EXPECT_EQ(back->moving_to(5), 2u);
  EXPECT_EQ(back->moving_to(6), SlotMap::kNoNode);
  EXPECT_EQ(back->to_json(), map.to_json());
}

TEST(SlotMapTest, RangesAreContiguousRunsOfOneOwner) {
  const SlotMap map = three_nodes();
  const std::vector<SlotRange> ranges = map.ranges();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0], (SlotRange{0, 5461, 0}));
  EXPECT_EQ(ranges[1], (SlotRange{5462, 10922, 1}));
  EXPECT_EQ(ranges[2], (SlotRange{10923, 16383, 2}));
}

TEST(SlotMapTest, RefusesBrokenMaps) {
  const char* bad[] = {
      "not json",
      "[]",
      R"({"nodes": [], "slots": []})",  // no version
      R"({"version": 1, "nodes": [{"id": "A!", "host": "h", "port": 1}], "slots": []})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1},
                                  {"id": "a", "host": "h", "port": 2}], "slots": []})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1}], "slots": [[0, 10, "b"]]})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1}], "slots": [[0, 16384, "a"]]})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1}],
          "slots": [[0, 10, "a"], [10, 20, "a"]]})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1}],
          "slots": [[0, 10, "a"]], "moving": [{"slot": 3, "to": "a"}]})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 70000}], "slots": []})",
      R"({"version": -1, "nodes": [], "slots": []})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "h", "port": 1}],
          "slots": [[4294967296, 4294967300, "a"]]})",
      R"({"version": 1, "nodes": [{"id": "a", "host": "", "port": 1}], "slots": []})",
  };
  for (const char* text : bad) {
    Result<SlotMap> map = SlotMap::from_json(text);
    EXPECT_FALSE(map.is_ok()) << text;
    if (!map.is_ok()) {
      EXPECT_EQ(map.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(SlotMapTest, RemovingANodeUnownsItsSlotsAndRenumbers) {
  SlotMap map = three_nodes();
  map.set_moving(6000, 0);  // a slot of n2 moving to n1
  map.remove_node("n1");
  EXPECT_EQ(map.nodes().size(), 2u);
  EXPECT_EQ(map.unowned_slots(), 5462u);
  EXPECT_EQ(map.owner(6000), 0u);  // n2, renumbered
  EXPECT_EQ(map.moving_to(6000), SlotMap::kNoNode);
}

TEST(SlotMapTest, BalancingMovesOnlySurplusAndHonoursWeights) {
  std::mt19937 rng(20261204);
  SlotMap map;
  int next_id = 0;
  for (int round = 0; round < 200; ++round) {
    const int action = static_cast<int>(rng() % 3);
    if (action == 0 || map.nodes().size() < 2) {
      map.upsert_node({"n" + std::to_string(next_id++), "127.0.0.1", 7000, 1 + rng() % 4});
    } else if (action == 1) {
      map.remove_node(map.nodes()[rng() % map.nodes().size()].id);
    } else {
      ClusterNode changed = map.nodes()[rng() % map.nodes().size()];
      changed.weight = 1 + rng() % 4;
      map.upsert_node(changed);
    }
    const std::vector<size_t> owners = balanced_owners(map);
    uint64_t total_weight = 0;
    for (const ClusterNode& n : map.nodes()) total_weight += n.weight;
    std::vector<size_t> before(map.nodes().size(), 0), after(map.nodes().size(), 0);
    size_t moved = 0;
    for (uint32_t s = 0; s < kSlotCount; ++s) {
      const auto slot = static_cast<uint16_t>(s);
      ASSERT_NE(owners[s], SlotMap::kNoNode);
      ++after[owners[s]];
      if (map.owner(slot) != SlotMap::kNoNode) {
        ++before[map.owner(slot)];
        if (map.owner(slot) != owners[s]) ++moved;
      }
    }
    size_t surplus = 0;
    for (size_t i = 0; i < map.nodes().size(); ++i) {
      const double exact = static_cast<double>(map.nodes()[i].weight) * kSlotCount /
                           static_cast<double>(total_weight);
      EXPECT_LT(std::abs(static_cast<double>(after[i]) - exact), 1.0);
      if (before[i] > after[i]) surplus += before[i] - after[i];
    }
    EXPECT_EQ(moved, surplus);
    for (uint32_t s = 0; s < kSlotCount; ++s) map.set_owner(static_cast<uint16_t>(s), owners[s]);
  }
}

}  // namespace
}  // namespace tierkv::cluster
