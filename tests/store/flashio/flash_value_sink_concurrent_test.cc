// FlashValueSink: values larger than memory written to flash as they
// arrive, in pieces of any size, with the window's backpressure, while
// readers read the keys: every read sees one version whole, every commit
// answers as SET would (NX/XX judged at the commit), and a sink dropped
// unfinished leaves the old value. Run under ThreadSanitizer with the
// other *_concurrent tests.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "store/flashio/flash_value_sink.h"
#include "store/store.h"
#include "tests/store/stream/stream_test_util.h"

namespace tierkv {
namespace {

using testing::kChunk;
using testing::TempDir;
using testing::value_for;

constexpr size_t kSize = testing::kLargeValue;  // larger than half of memory

Config small_tiered(const TempDir& dir) {
  return testing::large_value_config(dir);
}

std::string tagged(char tag) {
  return testing::tagged_large_value(tag);
}

// Feeds `value` in seeded pieces, waiting whenever the sink pauses, as a
// connection does; then commits. The commit's answer. `midway` runs once
// half of the value was given to the sink.
Result<memory::WriteResult> send(Store& s, const std::string& key, const std::string& value,
                                 const FlashValueSink::Commit& commit, std::mt19937& rng,
                                 bool finish = true, const std::function<void()>& midway = {}) {
  Result<std::unique_ptr<FlashValueSink>> sink = s.begin_flash_value(key, value.size());
  if (!sink) return sink.status();
  size_t at = 0;
  while (at < value.size()) {
    if ((*sink)->paused()) {
      auto room = std::make_shared<std::promise<void>>();
      auto ready = room->get_future();
      (*sink)->when_room([room] { room->set_value(); });
      ready.wait();
    }
    auto [dst, space] = (*sink)->next_writable();
    size_t n = std::min({space, value.size() - at, size_t{1} + rng() % (3 * kChunk / 2)});
    std::memcpy(dst, value.data() + at, n);
    (*sink)->advance(n);
    if (midway && at < value.size() / 2 && at + n >= value.size() / 2) midway();
    at += n;
  }
  if (!finish) return memory::WriteResult{};
  auto done = std::make_shared<std::promise<Result<memory::WriteResult>>>();
  auto answer = done->get_future();
  (*sink)->finish(commit, [done](Result<memory::WriteResult> r) { done->set_value(std::move(r)); });
  return answer.get();
}

TEST(FlashValueSinkConcurrentTest, ReadersSeeOneVersionWholeWhileValuesArrive) {
  TempDir dir;
  auto opened = Store::open(small_tiered(dir));
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  ASSERT_TRUE(s.writes_past_memory(kSize));
  const std::vector<std::string> values = {tagged('A'), tagged('B'), tagged('C')};

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      std::string out;
      while (!stop.load()) {
        for (const char* key : {"k0", "k1"}) {
          auto v = s.get(key);
          if (!v) continue;
          out.clear();
          v->append_to(out);
          reads.fetch_add(1);
          if (std::find(values.begin(), values.end(), out) == values.end()) bad.fetch_add(1);
        }
      }
    });
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(w);
      const std::string key = "k" + std::to_string(w);
      for (int round = 0; round < 6; ++round) {
        auto r = send(s, key, values[(round + w) % 3], {}, rng);
        if (!r || !r->written) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : writers) t.join();
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bad.load(), 0u) << "of " << reads.load() << " reads";
  for (int w = 0; w < 2; ++w) {
    auto v = s.get("k" + std::to_string(w));
    ASSERT_TRUE(v);
    std::string out;
    v->append_to(out);
    EXPECT_EQ(out, values[(5 + w) % 3]);
  }
}

TEST(FlashValueSinkConcurrentTest, ConditionsAndAbandonedValues) {
  TempDir dir;
  auto opened = Store::open(small_tiered(dir));
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  std::mt19937 rng(7);
  using memory::WriteCondition;
  // XX on an absent key, then NX: written once.
  auto r = send(s, "k", tagged('A'), {.condition = WriteCondition::kIfPresent}, rng);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->written);
  EXPECT_FALSE(s.exists("k"));
  r = send(s, "k", tagged('A'), {.condition = WriteCondition::kIfAbsent}, rng);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->written);
  r = send(s, "k", tagged('B'), {.condition = WriteCondition::kIfAbsent}, rng);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->written);
  // An expiry given at the commit; KEEPTTL keeps it.
  const int64_t deadline = int64_t{4} << 40;
  r = send(s, "k", tagged('B'), {.expire_at_ms = deadline}, rng);
  ASSERT_TRUE(r && r->written);
  r = send(s, "k", tagged('C'), {.keep_ttl = true}, rng);
  ASSERT_TRUE(r && r->written);
  ASSERT_TRUE(s.stat("k"));
  EXPECT_EQ(s.stat("k")->expire_at_ms, deadline);
  // A value that arrives whole but is never committed changes nothing.
  ASSERT_TRUE(send(s, "k", tagged('A'), {}, rng, /*finish=*/false));
  auto v = s.get("k");
  ASSERT_TRUE(v);
  std::string out;
  v->append_to(out);
  EXPECT_EQ(out, tagged('C'));
}

// A DEL or a small SET of the key while a large SET's value still arrives
// overlaps it, so either order is a right outcome: the large SET answers
// OK, and the key then holds the large value whole, or what the later
// operation left (absent, or the small value). Never an error: a removal
// that reaches one of the value's chunks in flight replaced a write that
// took effect first. Which order wins depends on when the chunks land.
TEST(FlashValueSinkConcurrentTest, AnOverlappingRemovalOrWriteNeverFailsTheLargeSet) {
  TempDir dir;
  auto opened = Store::open(small_tiered(dir));
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  std::mt19937 rng(11);
  for (int round = 0; round < 8; ++round) {
    const std::string large = tagged(static_cast<char>('A' + round));
    const bool removes = round % 2 == 0;
    ASSERT_TRUE(s.put("k", "old"));
    auto r = send(s, "k", large, {}, rng, true, [&] {
      if (removes) {
        s.remove("k");
      } else {
        ASSERT_TRUE(s.put("k", "small"));
      }
    });
    ASSERT_TRUE(r) << "round " << round << ": " << r.status().to_string();
    EXPECT_TRUE(r->written);
    auto v = s.get("k");
    if (!v) {
      EXPECT_TRUE(removes) << "round " << round << ": the key is gone after a SET";
      continue;
    }
    std::string out;
    v->append_to(out);
    if (out != large) {
      EXPECT_EQ(out, removes ? "(absent)" : "small") << "round " << round;
    }
  }
}

// flash-write-buffer caps the buffers of all sinks together: with room for
// two buffers, four values sent at once all land whole, the ones without a
// buffer wait their turn (counted), and the bytes held never pass the cap.
// Every buffer is given back once the sinks are gone.
TEST(FlashValueSinkConcurrentTest, SinksTogetherStayWithinFlashWriteBuffer) {
  TempDir dir;
  Config c = small_tiered(dir);
  c.flash_write_buffer = 2 * kChunk;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  ASSERT_EQ(s.stats().flash_write_buffer_limit, int64_t{2 * kChunk});

  std::atomic<bool> stop{false};
  std::atomic<int64_t> most{0};
  std::thread sampler([&] {
    while (!stop.load()) {
      int64_t used = s.stats().flash_write_buffer_used;
      int64_t seen = most.load();
      while (used > seen && !most.compare_exchange_weak(seen, used)) {
      }
      std::this_thread::yield();
    }
  });
  constexpr int kSenders = 4;
  std::vector<std::thread> senders;
  std::atomic<int> written{0};
  for (int i = 0; i < kSenders; ++i) {
    senders.emplace_back([&, i] {
      std::mt19937 rng(100 + i);
      auto r = send(s, "w" + std::to_string(i), tagged(static_cast<char>('A' + i)), {}, rng);
      if (r && r->written) written.fetch_add(1);
    });
  }
  for (auto& t : senders) t.join();
  stop = true;
  sampler.join();
  EXPECT_EQ(written.load(), kSenders);
  EXPECT_LE(most.load(), int64_t{2 * kChunk});
  EXPECT_GT(s.stats().flash_write_buffer_waits, 0u);
  EXPECT_EQ(s.stats().flash_write_buffer_used, 0);
  for (int i = 0; i < kSenders; ++i) {
    auto v = s.get("w" + std::to_string(i));
    ASSERT_TRUE(v) << i;
    std::string out;
    v->append_to(out);
    EXPECT_EQ(out, tagged(static_cast<char>('A' + i))) << i;
  }
}

}  // namespace
}  // namespace tierkv
