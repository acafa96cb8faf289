// Readers, writers and removers at once over both tiers: every value read is
// whole and one that was written for its key; memory never passes its
// budget. Run under ThreadSanitizer in CI.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "store/store.h"
#include "store/store_tiers.h"

namespace tierkv {
namespace {

// A value names its key and generation in its first 16 bytes and repeats a
// byte derived from both, so a torn or mixed value is detectable.
std::string make_value(uint32_t key, uint32_t gen, size_t size) {
  std::string v(size, static_cast<char>('a' + (key * 31 + gen) % 26));
  std::memcpy(v.data(), &key, 4);
  std::memcpy(v.data() + 4, &gen, 4);
  return v;
}

bool well_formed(const std::string& v, uint32_t key) {
  if (v.size() < 16) return false;
  uint32_t k, gen;
  std::memcpy(&k, v.data(), 4);
  std::memcpy(&gen, v.data() + 4, 4);
  if (k != key) return false;
  char fill = static_cast<char>('a' + (key * 31 + gen) % 26);
  for (size_t i = 8; i < v.size(); ++i)
    if (v[i] != fill) return false;
  return true;
}

TEST(TieredStoreConcurrentTest, MixedLoadNeverServesTornValues) {
  std::string dir = "/tmp/tierkv-tiered-conc-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  Config c;
  c.memory = 4 << 20;
  c.chunk_size = 32 << 10;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir + "/flash.dat";
  c.flash_size = 32 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.promotion_threshold = 1;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& store = **opened;

  constexpr uint32_t kKeys = 64;
  std::atomic<bool> stop{false};
  std::atomic<int> writers_left{2};
  std::atomic<uint64_t> reads{0}, flash_reads{0}, bad{0};
  auto key = [](uint32_t k) { return "k" + std::to_string(k); };
  auto size_of = [](uint32_t k) { return size_t{16} + (k % 7) * 60000; };

  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (uint32_t gen = 1; gen < 400 && !stop; ++gen) {
        uint32_t k = rng() % kKeys;
        auto r = store.put(key(k), make_value(k, gen, size_of(k)));
        if (!r && r.status().code() != StatusCode::kOutOfMemory) bad.fetch_add(1);
        if (StoreTiers::memory(store).used_bytes() > StoreTiers::memory(store).budget_bytes())
          bad.fetch_add(1);
        if (rng() % 10 == 0) store.remove(key(rng() % kKeys));
      }
      writers_left.fetch_sub(1);
    });
  }
  threads.emplace_back([&] {
    std::mt19937 rng(99);
    // Readers run while the writers do (bounded in count as well).
    for (int i = 0; i < 100000 && writers_left.load() > 0; ++i) {
      uint32_t k = rng() % kKeys;
      auto v = store.get(key(k));
      if (!v) continue;
      reads.fetch_add(1);
      if (!well_formed(v->to_string(), k)) bad.fetch_add(1);
    }
  });
  // A non-blocking read of key k; if it went to flash, counts and checks it.
  auto read_from_flash = [&](uint32_t k) {
    std::string got;
    std::promise<Status> done;
    ReadStart s = store.read(
        key(k), 0, UINT64_MAX,
        {[&](ValuePiece p) { got.append(p.bytes); }, [&](Status st) { done.set_value(st); }});
    if (s.where != ReadStart::Where::kFlash) return;
    flash_reads.fetch_add(1);
    Status st = done.get_future().get();
    if (st.is_ok() && !well_formed(got, k)) bad.fetch_add(1);
  };
  threads.emplace_back([&] {
    std::mt19937 rng(7);
    for (int i = 0; i < 100000 && writers_left.load() > 0; ++i) read_from_flash(rng() % kKeys);
  });
  for (std::thread& t : threads) t.join();
  // On a loaded machine the readers may have met no flash object while the
  // writers ran; once they stop, 11 MiB of values over 4 MiB of memory
  // leave plenty on flash: read each key once more.
  for (uint32_t k = 0; k < kKeys; ++k) read_from_flash(k);
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(flash_reads.load(), 0u);
  opened->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv
