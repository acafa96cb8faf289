// MemoryTier: chunking, ranged reads, versions, writers and pins.
#include "memory/memory_tier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

using testing::make_value;

MemoryTierOptions small_chunks(int64_t budget = 64 << 20) {
  MemoryTierOptions o;
  o.budget_bytes = budget;
  o.chunk_size = 4096;
  o.shards = 4;
  return o;
}

std::vector<uint32_t> chunk_sizes(MemoryTier& t, std::string_view key) {
  std::vector<uint32_t> out;
  auto info = t.stat(key);
  if (info) {
    for (size_t i = 0; i < info->chunks.size(); ++i) {
      EXPECT_EQ(info->chunks[i].index, i);
      out.push_back(info->chunks[i].size);
    }
  }
  return out;
}

TEST(MemoryTierChunkingTest, DefaultChunkIsOneMiB) {
  MemoryTier t(MemoryTierOptions{});
  EXPECT_EQ(t.chunk_size(), 1u << 20);
  ASSERT_TRUE(t.put("a", std::string((5 << 20) / 2, 'x')));  // 2.5 MiB
  EXPECT_EQ(chunk_sizes(t, "a"), (std::vector<uint32_t>{1 << 20, 1 << 20, 512 << 10}));
  ASSERT_TRUE(t.put("b", std::string(2 << 20, 'x')));
  EXPECT_EQ(chunk_sizes(t, "b"), (std::vector<uint32_t>{1 << 20, 1 << 20}));
}

TEST(MemoryTierChunkingTest, SmallObjectIsOneChunkOfItsOwnSize) {
  MemoryTier t(small_chunks());
  ASSERT_TRUE(t.put("a", std::string(100, 'x')));
  EXPECT_EQ(chunk_sizes(t, "a"), std::vector<uint32_t>{100});
  ASSERT_TRUE(t.put("b", ""));
  EXPECT_EQ(chunk_sizes(t, "b"), std::vector<uint32_t>{0});
  ASSERT_TRUE(t.put("c", std::string(4096, 'x')));
  EXPECT_EQ(chunk_sizes(t, "c"), std::vector<uint32_t>{4096});
  ASSERT_TRUE(t.put("d", std::string(4097, 'x')));
  EXPECT_EQ(chunk_sizes(t, "d"), (std::vector<uint32_t>{4096, 1}));
  EXPECT_EQ(t.stats().chunks, 1u + 1 + 1 + 2);
  EXPECT_EQ(t.stats().objects, 4u);
}

TEST(MemoryTierChunkingTest, ChargeMatchesWhatAPutCosts) {
  MemoryTierOptions o = small_chunks();
  o.shards = 1;
  o.expected_objects = 100;  // no index growth during the test
  MemoryTier t(o);
  for (uint64_t size : {0ull, 1ull, 4095ull, 4096ull, 10000ull, 100000ull}) {
    std::string key(20, 'p');
    key += std::to_string(size);
    int64_t before = t.used_bytes();
    ASSERT_TRUE(t.put(key, std::string(size, 'x')));
    EXPECT_EQ(t.used_bytes() - before, static_cast<int64_t>(t.charge_for_object(key.size(), size)))
        << size;
    EXPECT_GT(t.charge_for_object(key.size(), size), size);
  }
}

TEST(MemoryTierRangeTest, RangesAcrossChunkBoundaries) {
  MemoryTier t(small_chunks());
  std::string value = make_value("r", 1, 3 * 4096 + 500);
  ASSERT_TRUE(t.put("r", value));

  auto v = t.get("r", GetOptions{.offset = 4000, .length = 200});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->segment_count(), 2u);
  EXPECT_EQ(v->segment(0).size(), 96u);
  EXPECT_EQ(v->segment(1).size(), 104u);
  EXPECT_EQ(v->to_string(), value.substr(4000, 200));
  EXPECT_EQ(v->offset(), 4000u);
  EXPECT_EQ(v->length(), 200u);
  EXPECT_EQ(v->object_size(), value.size());

  auto whole = t.get("r");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->segment_count(), 4u);
  EXPECT_EQ(whole->to_string(), value);

  auto tail = t.get("r", GetOptions{.offset = 3 * 4096, .length = 10000});
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->segment_count(), 1u);
  EXPECT_EQ(tail->length(), 500u);  // clipped to the object
  EXPECT_EQ(tail->to_string(), value.substr(3 * 4096));

  auto past = t.get("r", GetOptions{.offset = value.size() + 5, .length = 10});
  ASSERT_TRUE(past);
  EXPECT_EQ(past->length(), 0u);
  EXPECT_EQ(past->segment_count(), 0u);
  EXPECT_EQ(past->to_string(), "");
}

TEST(MemoryTierRangeTest, RandomRangesMatchSubstr) {
  MemoryTier t(small_chunks());
  std::string value = make_value("r", 2, 10 * 4096 + 77);
  ASSERT_TRUE(t.put("r", value));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 500; ++i) {
    uint64_t off = rng() % (value.size() + 10);
    uint64_t len = rng() % 3 == 0 ? rng() % 10 : rng() % (3 * 4096);
    auto v = t.get("r", GetOptions{.offset = off, .length = len});
    ASSERT_TRUE(v);
    std::string expect = off >= value.size() ? "" : value.substr(off, len);
    ASSERT_EQ(v->to_string(), expect) << off << "+" << len;
    size_t total = 0;
    v->for_each_segment([&](std::string_view s) { total += s.size(); });
    ASSERT_EQ(total, expect.size());
  }
}

TEST(MemoryTierVersionTest, EveryWriteGetsANewVersion) {
  MemoryTier t(small_chunks());
  auto w1 = t.put("k", "one");
  auto w2 = t.put("k", "two");
  auto w3 = t.put("other", "x");
  ASSERT_TRUE(w1 && w2 && w3);
  EXPECT_TRUE(w1->written);
  EXPECT_GT(w2->version, w1->version);
  EXPECT_GT(w3->version, w2->version);
  auto v = t.get("k");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->version(), w2->version);
  EXPECT_EQ(v->to_string(), "two");
  EXPECT_EQ(t.object_count(), 2u);
}

TEST(MemoryTierVersionTest, WriteConditions) {
  MemoryTier t(small_chunks());
  auto nx = t.put("k", "a", WriteOptions{.condition = WriteCondition::kIfAbsent});
  ASSERT_TRUE(nx);
  EXPECT_TRUE(nx->written);
  auto nx2 = t.put("k", "b", WriteOptions{.condition = WriteCondition::kIfAbsent});
  ASSERT_TRUE(nx2);
  EXPECT_FALSE(nx2->written);
  auto xx = t.put("absent", "b", WriteOptions{.condition = WriteCondition::kIfPresent});
  EXPECT_FALSE(xx->written);
  EXPECT_FALSE(t.contains("absent"));
  auto wrong = t.put("k", "c",
                     WriteOptions{.condition = WriteCondition::kIfVersion,
                                  .expected_version = nx->version + 1000});
  EXPECT_FALSE(wrong->written);
  auto right =
      t.put("k", "d",
            WriteOptions{.condition = WriteCondition::kIfVersion, .expected_version = nx->version});
  EXPECT_TRUE(right->written);
  auto create = t.put("new", "e",
                      WriteOptions{.condition = WriteCondition::kIfVersion, .expected_version = 0});
  EXPECT_TRUE(create->written);
  EXPECT_EQ(t.get("k")->to_string(), "d");
}

TEST(MemoryTierVersionTest, RejectedWriteReturnsItsBytes) {
  MemoryTier t(small_chunks());
  ASSERT_TRUE(t.put("k", "a"));
  int64_t before = t.used_bytes();
  auto r =
      t.put("k", std::string(100000, 'b'), WriteOptions{.condition = WriteCondition::kIfAbsent});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->written);
  EXPECT_EQ(t.used_bytes(), before);
}

TEST(MemoryTierVersionTest, ReturnPreviousPinsTheOldVersion) {
  MemoryTier t(small_chunks());
  auto first = t.put("k", std::string(10000, 'a'));
  auto second = t.put("k", std::string(10, 'b'), WriteOptions{.return_previous = true});
  ASSERT_TRUE(second && second->previous);
  EXPECT_EQ(second->previous->version(), first->version);
  EXPECT_EQ(second->previous->to_string(), std::string(10000, 'a'));
  EXPECT_EQ(t.get("k")->to_string(), std::string(10, 'b'));
  auto third = t.put("absent", "x", WriteOptions{.return_previous = true});
  EXPECT_FALSE(third->previous);
}

TEST(ObjectWriterTest, FillInPiecesThenPublish) {
  MemoryTier t(small_chunks());
  std::string value = make_value("w", 1, 3 * 4096 + 10);
  auto w = t.prepare("w", value.size());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->chunk_count(), 4u);
  EXPECT_EQ(w->chunk_length(3), 10u);
  EXPECT_FALSE(t.contains("w")) << "nothing is visible before publish";
  ASSERT_TRUE(w->append(std::string_view(value).substr(0, 5000)));
  // In-place fill of the rest, as a socket read would do it.
  size_t pos = 5000;
  while (true) {
    auto [dst, room] = w->next_writable();
    if (room == 0) break;
    size_t n = std::min(room, value.size() - pos);
    std::memcpy(dst, value.data() + pos, n);
    w->advance(n);
    pos += n;
  }
  EXPECT_EQ(w->filled(), value.size());
  EXPECT_FALSE(w->append("x")) << "past the end";
  auto r = t.publish(std::move(*w));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->written);
  EXPECT_EQ(t.get("w")->to_string(), value);
}

TEST(ObjectWriterTest, IncompletePublishIsRejected) {
  MemoryTier t(small_chunks());
  auto w = t.prepare("w", 100);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->append("half"));
  auto r = t.publish(std::move(*w));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(t.contains("w"));
}

TEST(ObjectWriterTest, DroppedWriterReturnsItsBytes) {
  MemoryTier t(small_chunks());
  int64_t before = t.used_bytes();
  {
    auto w = t.prepare("w", 50000);
    ASSERT_TRUE(w);
    EXPECT_GE(t.used_bytes() - before, 50000);
  }
  EXPECT_EQ(t.used_bytes(), before);
}

TEST(ObjectWriterTest, MoveTransfersOwnership) {
  MemoryTier t(small_chunks());
  int64_t before = t.used_bytes();
  auto a = t.prepare("a", 10000);
  auto b = t.prepare("b", 20000);
  ASSERT_TRUE(a && b);
  int64_t both = t.used_bytes();
  ObjectWriter moved(std::move(*a));  // a is now empty
  EXPECT_EQ(moved.key(), "a");
  EXPECT_EQ(moved.size(), 10000u);
  EXPECT_EQ(t.used_bytes(), both);
  auto r = t.publish(std::move(*a));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "a moved-from writer is empty";
  // Assigning over a live writer returns the bytes it held.
  moved = std::move(*b);
  EXPECT_EQ(moved.key(), "b");
  EXPECT_LT(t.used_bytes(), both);
  ASSERT_TRUE(moved.append(std::string(20000, 'b')));
  ASSERT_TRUE(t.publish(std::move(moved)));
  EXPECT_EQ(t.get("b")->to_string(), std::string(20000, 'b'));
  EXPECT_FALSE(t.contains("a"));
  t.remove("b");
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes);
  EXPECT_GE(t.used_bytes(), before);
}

TEST(ObjectWriterTest, PublishingTwiceIsRejected) {
  MemoryTier t(small_chunks());
  auto w = t.prepare("k", 5000);
  ASSERT_TRUE(w->append(std::string(5000, 'a')));
  ASSERT_TRUE(t.publish(std::move(*w)));
  auto again = t.publish(std::move(*w));
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.get("k")->to_string(), std::string(5000, 'a'));
  // A writer whose condition failed is spent too.
  auto nx = t.prepare("k", 1);
  ASSERT_TRUE(nx->append("b"));
  auto r = t.publish(std::move(*nx), WriteOptions{.condition = WriteCondition::kIfAbsent});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->written);
  EXPECT_EQ(t.publish(std::move(*nx)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.get("k")->to_string(), std::string(5000, 'a'));
}

TEST(ObjectWriterTest, WriterOfAnotherTierIsRejected) {
  MemoryTier t1(small_chunks()), t2(small_chunks());
  auto w = t1.prepare("k", 1);
  ASSERT_TRUE(w->append("x"));
  EXPECT_EQ(t2.publish(std::move(*w)).status().code(), StatusCode::kInvalidArgument);
}

TEST(MemoryTierPinTest, ViewSurvivesOverwriteAndRemove) {
  MemoryTier t(small_chunks());
  std::string v1 = make_value("k", 1, 3 * 4096);
  ASSERT_TRUE(t.put("k", v1));
  auto view = t.get("k");
  ASSERT_TRUE(view);
  auto info = t.stat("k");
  EXPECT_EQ(info->chunks[0].pins, 1u);
  ASSERT_TRUE(t.put("k", make_value("k", 2, 100)));
  EXPECT_EQ(view->to_string(), v1);
  ASSERT_TRUE(t.remove("k"));
  EXPECT_FALSE(t.contains("k"));
  EXPECT_EQ(view->to_string(), v1);
  // The old chunks still count against the budget while pinned.
  int64_t pinned = t.used_bytes() - t.stats().index_bytes;
  EXPECT_GE(pinned, static_cast<int64_t>(v1.size()));
  view = Status::not_found();
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes);
}

TEST(MemoryTierTest, RemoveAndContains) {
  MemoryTier t(small_chunks());
  EXPECT_FALSE(t.remove("k"));
  ASSERT_TRUE(t.put("k", "v"));
  EXPECT_TRUE(t.contains("k"));
  EXPECT_TRUE(t.remove("k"));
  EXPECT_FALSE(t.remove("k"));
  EXPECT_EQ(t.get("k").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(t.stat("k"));
}

TEST(MemoryTierTest, BinaryKeysAndValues) {
  MemoryTier t(small_chunks());
  std::string key("a\0b", 3), value("\0\1\2\0", 4);
  ASSERT_TRUE(t.put(key, value));
  EXPECT_FALSE(t.contains("a"));
  EXPECT_EQ(t.get(key)->to_string(), value);
}

TEST(MemoryTierTest, ObjectLargerThanBudgetIsOutOfMemory) {
  MemoryTier t(small_chunks(1 << 20));
  auto r = t.put("big", std::string(2 << 20, 'x'));
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes);
}

TEST(MemoryTierTest, RandomKeyReturnsAPresentKey) {
  MemoryTier t(small_chunks());
  EXPECT_FALSE(t.random_key());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(t.put(testing::key_of(i), "v"));
  for (int i = 0; i < 20; ++i) {
    auto k = t.random_key();
    ASSERT_TRUE(k);
    EXPECT_TRUE(t.contains(*k));
  }
}

}  // namespace
}  // namespace tierkv::memory
