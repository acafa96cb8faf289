// StagedObject: an object written chunk by chunk is seen whole or not at
// all, at run time and after a restart; whatever changed the key since the
// staging began refuses the commit, and the version before stays readable.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <span>
#include <string>

#include "flash/flash_tier.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::open_or_die;
using testing::pattern;
using testing::read_known;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

constexpr size_t kChunk = 64 << 10;

Status stage_sync(FlashTier::StagedObject& object, uint32_t index, const std::string& data) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto done = std::make_shared<std::promise<Status>>();
    auto future = done->get_future();
    Status st = object.write_chunk(index, data, [done](Status s) { done->set_value(s); });
    if (st.code() == StatusCode::kBusy) continue;
    if (!st.is_ok()) return st;
    return future.get();
  }
  return Status::busy("still busy");
}

// Version 1 of "k": two chunks.
void write_v1(FlashTier& t) {
  for (uint32_t c = 0; c < 2; ++c) {
    ASSERT_TRUE(write_sync(t, {.key = "k",
                               .chunk_index = c,
                               .version = 1,
                               .object_size = 2 * kChunk,
                               .chunk_count = 2,
                               .data = pattern(kChunk, 10 + c)})
                    .is_ok());
  }
}

FlashTier::StagedObject begin_v2(FlashTier& t, uint32_t chunks = 3) {
  auto staged = t.begin_staged(
      {.key = "k", .version = 2, .object_size = chunks * kChunk, .chunk_count = chunks});
  EXPECT_TRUE(staged.is_ok()) << staged.status().to_string();
  return std::move(*staged);
}

void expect_v1(FlashTier& t) {
  auto info = t.lookup("k");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 1u);
  EXPECT_EQ(*read_sync(t, "k", 1), pattern(kChunk, 11));
}

TEST(FlashStagedTest, InvisibleUntilTheLastChunkThenWholeAndDurable) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    write_v1(*t);
    auto v2 = begin_v2(*t);
    ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
    // The last chunk goes only after all the others.
    EXPECT_EQ(v2.write_chunk(2, pattern(kChunk, 22), [](Status) {}).code(),
              StatusCode::kInvalidArgument);
    ASSERT_TRUE(stage_sync(v2, 1, pattern(kChunk, 21)).is_ok());
    EXPECT_EQ(v2.chunks_landed(), 2u);
    expect_v1(*t);
    EXPECT_FALSE(t->contains("k", 0, 2));
    ASSERT_TRUE(stage_sync(v2, 2, pattern(kChunk, 22)).is_ok());
    auto info = t->lookup("k");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->version, 2u);
    EXPECT_EQ(info->chunks.size(), 3u);
    EXPECT_EQ(info->object_size, 3 * kChunk);
    t->flush();
  }
  auto t = open_or_die(o);  // no snapshot: a scan
  for (uint32_t c = 0; c < 3; ++c) EXPECT_EQ(*read_sync(*t, "k", c, 2), pattern(kChunk, 20 + c));
}

TEST(FlashStagedTest, AbandonedStagingLeavesThePreviousVersionAcrossRestart) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    write_v1(*t);
    auto v2 = begin_v2(*t);
    ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
    ASSERT_TRUE(stage_sync(v2, 1, pattern(kChunk, 21)).is_ok());
    t->flush();
  }  // v2 dropped without its last chunk: a job cancelled, or a crash
  auto t = open_or_die(o);
  EXPECT_EQ(t->recovery().objects_incomplete, 1u);
  expect_v1(*t);
}

TEST(FlashStagedTest, RemovalSinceTheBeginRefusesTheCommit) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    write_v1(*t);
    auto v2 = begin_v2(*t, 2);
    ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
    t->remove("k", 2);  // a DEL after the job began covers its version
    const Status last = stage_sync(v2, 1, pattern(kChunk, 21));
    EXPECT_EQ(last.code(), StatusCode::kConflict) << last.to_string();
    EXPECT_TRUE(v2.superseded());  // a later operation replaced it: the write happened
    EXPECT_FALSE(t->lookup("k"));
    t->flush();
  }
  auto t = open_or_die(o);
  EXPECT_FALSE(t->lookup("k"));
}

TEST(FlashStagedTest, ANewerVersionIndexedMeanwhileWins) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  write_v1(*t);
  auto v2 = begin_v2(*t, 2);
  ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
  ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 3, .data = "three"}).is_ok());
  EXPECT_EQ(stage_sync(v2, 1, pattern(kChunk, 21)).code(), StatusCode::kConflict);
  EXPECT_TRUE(v2.superseded());
  EXPECT_EQ(t->lookup("k")->version, 3u);
  EXPECT_EQ(*read_sync(*t, "k", 0), "three");
}

TEST(FlashStagedTest, ClearRefusesTheCommit) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  auto v2 = begin_v2(*t, 2);
  ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
  t->clear();
  EXPECT_EQ(stage_sync(v2, 1, pattern(kChunk, 21)).code(), StatusCode::kConflict);
  EXPECT_FALSE(v2.superseded());
  EXPECT_FALSE(t->lookup("k"));
}

TEST(FlashStagedTest, AReclaimedChunkRefusesTheCommit) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.region_size = 1 << 20;
  o.size = layout_size(3, o.region_size);  // filler soon reclaims the first region
  auto t = open_or_die(o);
  auto v2 = begin_v2(*t, 2);
  ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
  for (int i = 0; i < 200 && !v2.lost(); ++i) {
    ASSERT_TRUE(write_sync(*t, {.key = "filler" + std::to_string(i),
                                .version = 10 + static_cast<uint64_t>(i),
                                .data = pattern(kChunk, i)})
                    .is_ok());
  }
  ASSERT_TRUE(v2.lost()) << "the filler never reclaimed the staged chunk's region";
  EXPECT_EQ(v2.write_chunk(1, pattern(kChunk, 21), [](Status) {}).code(), StatusCode::kConflict);
  // Lost, not replaced: a SET of it must not answer OK.
  EXPECT_FALSE(v2.superseded());
  EXPECT_FALSE(t->lookup("k"));
}

TEST(FlashStagedTest, BadSpecsAreRefused) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  EXPECT_FALSE(t->begin_staged({.key = "", .version = 1, .object_size = 1, .chunk_count = 1}));
  EXPECT_FALSE(t->begin_staged({.key = "k", .version = 1, .object_size = 1, .chunk_count = 0}));
  auto v = begin_v2(*t, 1);
  EXPECT_EQ(v.write_chunk(1, "x", [](Status) {}).code(), StatusCode::kInvalidArgument);
  // A one-chunk object: its only chunk is its last, and commits it.
  ASSERT_TRUE(stage_sync(v, 0, "only").is_ok());
  EXPECT_EQ(*read_sync(*t, "k", 0), "only");
}

// A SET's expiry follows its value: set before the last chunk, it is the
// object's at run time and after a restart that scans the device.
TEST(FlashStagedTest, AnExpirySetBeforeTheLastChunkIsKeptAcrossARestart) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  const int64_t expire = int64_t{4} << 40;  // far in the future
  {
    auto t = open_or_die(o);
    auto v2 = begin_v2(*t);
    ASSERT_TRUE(stage_sync(v2, 0, pattern(kChunk, 20)).is_ok());
    ASSERT_TRUE(stage_sync(v2, 1, pattern(kChunk, 21)).is_ok());
    v2.set_expiry(expire);
    ASSERT_TRUE(stage_sync(v2, 2, pattern(kChunk, 22)).is_ok());
    ASSERT_TRUE(t->lookup("k"));
    EXPECT_EQ(t->lookup("k")->expire_at_ms, expire);
  }
  auto t = open_or_die(o);
  auto info = t->lookup("k");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, 2u);
  EXPECT_EQ(info->expire_at_ms, expire);
}

// A read that began on a version keeps reading it after an overwrite
// replaced it in the index, from where its chunks were.
TEST(FlashStagedTest, KnownLocationsKeepAReadOfAReplacedVersion) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  write_v1(*t);
  std::optional<FlashTier::VersionLocations> known = t->locate_version("k", 1);
  ASSERT_TRUE(known);
  EXPECT_FALSE(t->locate_version("k", 2));
  ASSERT_TRUE(write_sync(*t, {.key = "k",
                              .chunk_index = 0,
                              .version = 2,
                              .object_size = 10,
                              .chunk_count = 1,
                              .data = "new value!"})
                  .is_ok());
  EXPECT_EQ(read_known(*t, "k", 1, 1, nullptr).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*read_known(*t, "k", 0, 1, &*known), pattern(kChunk, 10));
  EXPECT_EQ(*read_known(*t, "k", 1, 1, &*known), pattern(kChunk, 11));
  EXPECT_EQ(*read_known(*t, "k", 0, 2, &*known), "new value!");
}

}  // namespace
}  // namespace tierkv::flash
