// Readers racing preheat commits: every read of a key sees one version
// whole (the old value or the preheated one, never a mix), while jobs
// replace the key again and again and writers overwrite it in between.
// Run under ThreadSanitizer with the other *_concurrent tests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

TEST(PreheatConcurrentTest, ReadersSeeOneVersionWholeWhileJobsCommit) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("src"));
  Config c;
  c.memory = 16 << 20;
  c.chunk_size = 64 << 10;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 128 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.preheat_sources = {"file://" + dir.file("src") + "/"};
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;

  // Sources A and B, and what writers SET: each value starts with a tag
  // byte and is otherwise a function of the tag, so a read is checkable.
  constexpr size_t kSize = (5 << 16) + 321;  // six chunks, the last short
  auto value = [&](char tag) {
    std::string v = value_for(static_cast<uint64_t>(tag), kSize);
    v[0] = tag;
    return v;
  };
  for (char tag : {'A', 'B'}) {
    std::ofstream(dir.file(std::string("src/") + tag), std::ios::binary) << value(tag);
  }
  ASSERT_TRUE(s.put("k", value('S')).is_ok());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      std::string out;
      while (!stop.load()) {
        auto v = s.get("k");
        if (!v) continue;  // between a DEL and the next write
        out.clear();
        v->append_to(out);
        if (out.empty() || out != value(out[0])) bad.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int done = 0, refused = 0;
  for (int round = 0; round < 40 && std::chrono::steady_clock::now() < deadline; ++round) {
    const char tag = round % 2 ? 'A' : 'B';
    auto id = s.preheats().start({.key = "k",
                                  .source = "file://" + dir.file(std::string("src/") + tag),
                                  .piece_size = 2 << 16,
                                  .cache = round % 3 != 0,
                                  .sha256 = "",
                                  .ttl_s = 0});
    ASSERT_TRUE(id) << id.status().to_string();
    if (round % 4 == 1) {
      ASSERT_TRUE(s.put("k", value('S')).is_ok());
    }
    if (round % 8 == 3) s.remove("k");
    for (;;) {
      const PreheatJobStatus j = *s.preheats().job(*id);
      if (j.state == PreheatState::kDone) ++done;
      if (j.state == PreheatState::kFailed) ++refused;
      if (j.state != PreheatState::kQueued && j.state != PreheatState::kRunning) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(done, 0);
  std::printf("rounds: %d done, %d refused by a write that came during the job; %llu reads\n", done,
              refused, static_cast<unsigned long long>(reads.load()));
}

}  // namespace
}  // namespace tierkv
