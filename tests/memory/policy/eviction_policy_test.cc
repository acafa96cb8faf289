// Each policy on small sequences checked by hand against its algorithm,
// through the EvictionPolicy interface alone.
#include "memory/policy/eviction_policy.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tierkv::memory {
namespace {

class PolicyBench {
 public:
  explicit PolicyBench(PolicyKind kind) : policy_(make_policy(kind)) {
    for (int i = 0; i < 26; ++i) {
      hooks_[i].id = 1000 + i;
      hooks_[i].bytes = 1;
    }
  }
  PolicyHook* h(char name) { return &hooks_[name - 'A']; }
  void insert(const std::string& names) {
    for (char c : names) policy_->insert(h(c));
  }
  void touch(const std::string& names) {
    for (char c : names) policy_->touch(h(c));
  }
  void reinstate(char name) { policy_->reinstate(h(name)); }
  void pin(const std::string& names) {
    for (char c : names) pinned_.insert(h(c));
  }
  // Evicts n victims and names them in order; '-' where nothing was evictable.
  std::string evict(int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      PolicyHook* v = policy_->evict([&](const PolicyHook* x) { return !pinned_.count(x); });
      out += v ? static_cast<char>('A' + (v - hooks_)) : '-';
      if (v) {
        EXPECT_FALSE(v->linked);
      }
    }
    return out;
  }
  // Takes n steps of the writeback walk and names them; '-' where a walk ended.
  std::string walk(int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      PolicyHook* v = policy_->next_cold();
      out += v ? static_cast<char>('A' + (v - hooks_)) : '-';
      if (v) {
        EXPECT_TRUE(v->linked) << "the walk returned an entry the policy no longer holds";
      }
    }
    return out;
  }
  EvictionPolicy& policy() { return *policy_; }

 private:
  std::unique_ptr<EvictionPolicy> policy_;
  PolicyHook hooks_[26];
  std::set<const PolicyHook*> pinned_;
};

TEST(PolicyNamesTest, ParseAndName) {
  for (PolicyKind k : kAllPolicies) EXPECT_EQ(parse_policy(policy_name(k)), k);
  EXPECT_FALSE(parse_policy("arc"));
}

TEST(LruPolicyTest, EvictsLeastRecentlyUsed) {
  PolicyBench b(PolicyKind::kLru);
  b.insert("ABCD");
  b.touch("A");  // order, newest first: A D C B
  EXPECT_EQ(b.evict(2), "BC");
  b.insert("E");  // E A D
  b.touch("D");   // D E A
  EXPECT_EQ(b.evict(3), "AED");
  EXPECT_EQ(b.evict(1), "-");
}

TEST(LruPolicyTest, PinnedTailIsPassedOver) {
  PolicyBench b(PolicyKind::kLru);
  b.insert("ABC");
  b.pin("A");
  EXPECT_EQ(b.evict(1), "B");  // A moves to the front as if just used
  EXPECT_EQ(b.evict(1), "C");
  EXPECT_EQ(b.evict(1), "-");
  EXPECT_EQ(b.policy().entries(), 1u);
}

TEST(ClockPolicyTest, ReferenceBitGivesASecondChance) {
  PolicyBench b(PolicyKind::kClock);
  b.insert("ABCD");
  b.touch("B");
  // Hand starts at the oldest (A): A goes; B's bit is cleared; C goes.
  EXPECT_EQ(b.evict(2), "AC");
  // Hand now at D. E goes just behind the hand: the last place it looks.
  b.insert("E");
  EXPECT_EQ(b.evict(3), "DBE");
}

TEST(ClockPolicyTest, AllReferencedStillEvictsAfterOneSweep) {
  PolicyBench b(PolicyKind::kClock);
  b.insert("ABC");
  b.touch("ABC");
  EXPECT_EQ(b.evict(1), "A");  // one sweep clears every bit
  b.pin("B");
  EXPECT_EQ(b.evict(2), "C-");
}

TEST(ClockPolicyTest, RemovingTheHandEntryMovesTheHand) {
  PolicyBench b(PolicyKind::kClock);
  b.insert("ABCD");
  EXPECT_EQ(b.evict(1), "A");  // hand now at B
  b.policy().remove(b.h('B'));
  EXPECT_EQ(b.evict(1), "C");
}

TEST(SievePolicyTest, VisitedSurvivorsKeepTheirPlace) {
  PolicyBench b(PolicyKind::kSieve);
  b.insert("ABCD");
  b.touch("AC");
  // Hand from the tail: A visited (cleared), B evicted; then C cleared, D evicted.
  EXPECT_EQ(b.evict(2), "BD");
  // Hand wraps to the tail: A (cleared earlier) goes; hand stays at C.
  EXPECT_EQ(b.evict(1), "A");
  b.insert("E");  // new entries go to the head, away from the hand
  EXPECT_EQ(b.evict(2), "CE");
}

TEST(SievePolicyTest, AllVisitedEvictsTheTailAfterOnePass) {
  PolicyBench b(PolicyKind::kSieve);
  b.insert("ABCD");
  b.touch("ABCD");
  // One pass clears every bit without moving anything; the hand wraps to A.
  EXPECT_EQ(b.evict(1), "A");
  b.touch("B");
  EXPECT_EQ(b.evict(1), "C");  // the hand went on from A's place: B is skipped
}

TEST(S3FifoPolicyTest, OneHitWondersLeaveFromTheSmallQueue) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("ABCDEFGHIJ");
  b.touch("B");
  // A (never hit) is evicted into the ghost; B moves to main; C is evicted.
  EXPECT_EQ(b.evict(2), "AC");
  // A returns while remembered by the ghost: it goes straight to main.
  b.insert("A");
  EXPECT_EQ(b.h('A')->queue, b.h('B')->queue);
  // Small drains first (it holds well over 10%), then main in FIFO order.
  EXPECT_EQ(b.evict(9), "DEFGHIJBA");
  EXPECT_EQ(b.evict(1), "-");
}

TEST(S3FifoPolicyTest, MainReinsertsEntriesWithFrequency) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("XY");
  b.touch("XY");
  b.insert("Z");
  // X and Y were hit in small: both move to main; Z was not: it goes.
  EXPECT_EQ(b.evict(1), "Z");
  b.touch("X");
  b.touch("X");  // X has 2 credits: it is reinserted twice before Y is not
  EXPECT_EQ(b.evict(2), "YX");
}

TEST(S3FifoPolicyTest, FrequencyIsCappedAtThree) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("PQ");
  b.touch("PQ");
  b.insert("R");
  EXPECT_EQ(b.evict(1), "R");  // P and Q now in main: front Q P back
  for (int i = 0; i < 10; ++i) b.touch("P");
  b.touch("QQQ");
  // P has 3 credits (capped, not 10), Q 3; P, nearer the tail, runs out first.
  EXPECT_EQ(b.evict(2), "PQ");
}

TEST(S3FifoPolicyTest, PinnedSmallQueueFallsBackToMain) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("M");
  b.touch("M");
  b.insert("PQ");
  b.pin("PQ");
  // Small (P, Q) is over its share but all pinned: M, promoted to main, goes.
  EXPECT_EQ(b.evict(1), "M");
  EXPECT_EQ(b.evict(1), "-");
}

TEST(S3FifoPolicyTest, PinnedMainFallsBackToSmall) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("ABCDEFGHIJKLMNOPQRST");
  b.touch("ABCDEFGHIJKLMNOPQRS");
  b.pin("ABCDEFGHIJKLMNOPQRS");
  // Every hit entry moves to main; T (unhit) is evicted from small.
  EXPECT_EQ(b.evict(1), "T");
  b.insert("U");  // small: U only, under 10% of 20 entries
  EXPECT_EQ(b.evict(1), "U");
}

TEST(S3FifoPolicyTest, GhostIsBoundedByResidentEntries) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("AB");
  EXPECT_EQ(b.evict(1), "A");  // ghost limit: 1 resident entry
  EXPECT_EQ(b.evict(1), "B");  // ghost limit 0: A forgotten, B too
  b.insert("A");
  EXPECT_EQ(b.h('A')->queue, 0) << "a forgotten id must enter the small queue";
}

class AnyPolicyTest : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(AnyPolicyTest, RemoveThenEvictNeverReturnsRemoved) {
  PolicyBench b(GetParam());
  b.insert("ABCDEF");
  b.touch("BD");
  b.policy().remove(b.h('C'));
  b.policy().remove(b.h('A'));
  EXPECT_EQ(b.policy().entries(), 4u);
  std::string out = b.evict(5);
  EXPECT_EQ(out.back(), '-');
  std::string victims = out.substr(0, 4);
  std::sort(victims.begin(), victims.end());
  EXPECT_EQ(victims, "BDEF");
}

TEST_P(AnyPolicyTest, NothingEvictableReturnsNull) {
  PolicyBench b(GetParam());
  EXPECT_EQ(b.evict(1), "-");
  b.insert("ABC");
  b.touch("B");
  b.pin("ABC");
  EXPECT_EQ(b.evict(1), "-");
  EXPECT_EQ(b.policy().entries(), 3u);
}

TEST_P(AnyPolicyTest, WalkVisitsColdestFirstInEvictionOrder) {
  PolicyBench walked(GetParam()), twin(GetParam());
  walked.insert("ABCDEFGH");
  twin.insert("ABCDEFGH");
  // No hits: every policy evicts in insertion order, and walks in it.
  EXPECT_EQ(walked.walk(9), "ABCDEFGH-");
  EXPECT_EQ(twin.evict(8), "ABCDEFGH");
  EXPECT_EQ(walked.evict(8), "ABCDEFGH") << "the walk changed the eviction order";
}

TEST_P(AnyPolicyTest, WalkChangesNothing) {
  PolicyBench walked(GetParam()), twin(GetParam());
  for (PolicyBench* b : {&walked, &twin}) {
    b->insert("ABCDEF");
    b->touch("BD");
    b->pin("C");
    EXPECT_NE(b->evict(1), "-");
    b->insert("GH");
    b->touch("CG");  // neither can have been evicted
  }
  std::string seen = walked.walk(20);  // more than a whole walk, and the start of the next
  EXPECT_NE(seen.find('-'), std::string::npos) << seen;
  EXPECT_EQ(walked.evict(8), twin.evict(8));
}

TEST_P(AnyPolicyTest, WalkEndsThenRestartsAtTheColdest) {
  PolicyBench b(GetParam());
  b.insert("ABC");
  EXPECT_EQ(b.walk(5), "ABC-A");
  EXPECT_EQ(b.walk(0), "");
}

TEST_P(AnyPolicyTest, WalkHandFollowsARemovedEntry) {
  PolicyBench b(GetParam());
  b.insert("ABCDE");
  EXPECT_EQ(b.walk(1), "A");
  b.policy().remove(b.h('B'));  // the entry the hand is on
  EXPECT_EQ(b.walk(4), "CDE-");
}

TEST_P(AnyPolicyTest, WalkNeverFallsBehindEviction) {
  PolicyBench b(GetParam());
  b.insert("ABCDEF");
  EXPECT_EQ(b.walk(1), "A");
  EXPECT_EQ(b.evict(2), "AB");  // B, under the hand, goes: the hand moves on
  EXPECT_EQ(b.walk(5), "CDEF-");
}

TEST_P(AnyPolicyTest, WalkSurvivesEmptying) {
  PolicyBench b(GetParam());
  b.insert("AB");
  EXPECT_EQ(b.walk(1), "A");
  EXPECT_EQ(b.evict(2), "AB");
  EXPECT_EQ(b.walk(2), "--");
  b.insert("C");
  EXPECT_EQ(b.walk(2), "C-");
}

// A victim put back (its offload was refused) is the next victim, and the
// order after it is the order as if it had left the first time.
TEST_P(AnyPolicyTest, ReinstatedVictimIsTheNextVictim) {
  PolicyBench put_back(GetParam()), twin(GetParam());
  for (PolicyBench* b : {&put_back, &twin}) {
    b->insert("ABCDEF");
    b->touch("AC");
  }
  std::string first = put_back.evict(1);
  ASSERT_NE(first, "-");
  put_back.reinstate(first[0]);
  EXPECT_TRUE(put_back.h(first[0])->linked);
  EXPECT_EQ(put_back.policy().entries(), 6u);
  EXPECT_EQ(put_back.evict(6), twin.evict(6));
}

TEST(S3FifoPolicyTest, ReinstatedVictimStaysInTheSmallQueue) {
  PolicyBench b(PolicyKind::kS3Fifo);
  b.insert("ABCD");
  ASSERT_EQ(b.evict(1), "A");
  b.reinstate('A');
  EXPECT_EQ(b.h('A')->queue, 0) << "its ghost entry promoted it to main";
  ASSERT_EQ(b.evict(1), "A");
  b.insert("A");  // evicted for real this time: its ghost entry counts
  EXPECT_EQ(b.h('A')->queue, 1);
}

INSTANTIATE_TEST_SUITE_P(All, AnyPolicyTest, ::testing::ValuesIn(kAllPolicies),
                         [](const auto& info) { return std::string(policy_name(info.param)); });

}  // namespace
}  // namespace tierkv::memory
