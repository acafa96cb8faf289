// Handoffs: which slots count as just handed away, and for how long.
#include "cluster/handoffs.h"

#include <gtest/gtest.h>

namespace tierkv::cluster {
namespace {

using std::chrono::milliseconds;

class HandoffsTest : public ::testing::Test {
 protected:
  HandoffsTest() {
    for (const char* id : {"me", "b", "c"}) old.upsert_node({id, "127.0.0.1", 7000, 1});
    for (uint32_t s = 0; s < kSlotCount; ++s) old.set_owner(static_cast<uint16_t>(s), 0);
    next = old;
    next.set_version(2);
  }
  SlotMap old, next;
  Handoffs handoffs{milliseconds(5000)};
};

TEST_F(HandoffsTest, AMoveThatFlipsIsHandedToItsTargetForTheWindow) {
  old.set_moving(10, 1);
  next.set_owner(10, 1);
  EXPECT_FALSE(handoffs.any(1000));
  handoffs.note(&old, next, "me", 1000);
  EXPECT_TRUE(handoffs.any(1000));
  EXPECT_TRUE(handoffs.handed_to(10, "b", 1000));
  EXPECT_TRUE(handoffs.handed_to(10, "b", 5999));
  EXPECT_FALSE(handoffs.handed_to(10, "c", 1000));  // another owner since
  EXPECT_FALSE(handoffs.handed_to(11, "b", 1000));
  EXPECT_FALSE(handoffs.handed_to(10, "b", 6000));
  EXPECT_FALSE(handoffs.any(6000));
}

TEST_F(HandoffsTest, OnlyAMoveFromHereToItsOwnTargetCounts) {
  next.set_owner(20, 1);  // given away without a move (this node was thought dead)
  old.set_owner(30, 2);
  old.set_moving(30, 1);  // another node's move
  next.set_owner(30, 1);
  old.set_moving(40, 1);  // moving to b, given to c instead
  next.set_owner(40, 2);
  old.set_moving(50, 1);  // still moving
  next.set_moving(50, 1);
  handoffs.note(&old, next, "me", 1000);
  for (uint16_t slot : {20, 30, 40, 50}) {
    EXPECT_FALSE(handoffs.handed_to(slot, "b", 1000)) << slot;
    EXPECT_FALSE(handoffs.handed_to(slot, "c", 1000)) << slot;
  }
  EXPECT_FALSE(handoffs.any(1000));
}

TEST_F(HandoffsTest, NothingBeforeAFirstMapOrForANodeTheOldMapLacks) {
  old.set_moving(10, 1);
  next.set_owner(10, 1);
  handoffs.note(nullptr, next, "me", 1000);
  handoffs.note(&old, next, "stranger", 1000);
  EXPECT_FALSE(handoffs.handed_to(10, "b", 1000));
}

TEST_F(HandoffsTest, ALaterMapKeepsEarlierHandoffsUntilTheyExpire) {
  old.set_moving(10, 1);
  next.set_owner(10, 1);
  next.set_moving(11, 2);
  handoffs.note(&old, next, "me", 1000);
  SlotMap third = next;
  third.set_version(3);
  third.set_owner(11, 2);
  handoffs.note(&next, third, "me", 3000);
  EXPECT_TRUE(handoffs.handed_to(10, "b", 5999));
  EXPECT_TRUE(handoffs.handed_to(11, "c", 7999));
  EXPECT_FALSE(handoffs.handed_to(10, "b", 6000));
  handoffs.note(&third, third, "me", 6500);  // expired entries go
  EXPECT_FALSE(handoffs.handed_to(10, "b", 6500));
  EXPECT_TRUE(handoffs.handed_to(11, "c", 6500));
}

}  // namespace
}  // namespace tierkv::cluster
