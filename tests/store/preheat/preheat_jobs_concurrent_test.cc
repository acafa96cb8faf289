// The preheat job table past its cap: once more jobs ended than it keeps,
// starting a job forgets the oldest ended ones (never one that runs or
// waits), while other jobs end on pool threads. Under ThreadSanitizer this
// is the test for the trim that freed a job while holding its lock.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;

constexpr int kKept = 1000;  // Preheater's kJobsKept

TEST(PreheatJobsConcurrentTest, StartingPastTheCapForgetsTheOldestEndedJobsOnly) {
  TempDir dir;
  Config c;
  c.memory = 8 << 20;
  c.chunk_size = 64 << 10;
  c.active_expire_hz = 0;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 64 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.preheat_sources = {"file://" + dir.file("src") + "/"};
  c.preheat_max_queued = 4 * kKept;  // all of them may wait at once
  std::filesystem::create_directories(dir.file("src"));
  std::ofstream(dir.file("src/tiny.bin"), std::ios::binary) << "tiny";
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  const std::string url = "file://" + dir.file("src/tiny.bin");
  auto preheat = [&](int i) {
    return s.preheats().start({.key = "k" + std::to_string(i % 16),
                               .source = url,
                               .piece_size = 0,
                               .cache = false,
                               .sha256 = "",
                               .ttl_s = 0});
  };
  std::vector<uint64_t> ids;
  for (int i = 0; i < kKept + 200; ++i) {  // later starts trim while jobs end
    auto id = preheat(i);
    ASSERT_TRUE(id) << id.status().to_string();
    ids.push_back(*id);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto ended = [&](uint64_t id) {
    std::optional<PreheatJobStatus> j = s.preheats().job(id);
    return j && j->state != PreheatState::kQueued && j->state != PreheatState::kRunning;
  };
  while (!ended(ids.back()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(ended(ids.back()));
  auto last = preheat(0);
  ASSERT_TRUE(last);
  EXPECT_LE(s.preheats().jobs().size(), static_cast<size_t>(kKept) + 1);
  EXPECT_FALSE(s.preheats().job(ids.front())) << "the oldest ended job is forgotten";
  std::optional<PreheatJobStatus> j = s.preheats().job(*last);
  ASSERT_TRUE(j) << "a queued or running job is never forgotten";
  std::optional<PreheatJobStatus> recent = s.preheats().job(ids.back());
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->state, PreheatState::kDone) << recent->error;
}

}  // namespace
}  // namespace tierkv
