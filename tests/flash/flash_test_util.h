// Helpers shared by the flash tests: temporary directories and synchronous
// wrappers around the asynchronous FlashTier calls.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>

#include "flash/flash_tier.h"

namespace tierkv::flash::testing {

class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/tierkv-flash-test-XXXXXX";
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline FlashOptions small_options(const std::string& path) {
  FlashOptions o;
  o.path = path;
  o.size = 64 << 20;
  o.region_size = 4 << 20;
  o.write_buffer_size = 1 << 20;
  o.queue_depth = 16;
  o.check_region_lists = true;
  // Rounds read their region (the server's default walks indexes this small).
  o.round_read_min_chunks = 0;
  return o;
}

inline std::string pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

// XORs the byte at `offset` of the file with `mask` (damage on the device).
inline void flip_byte(const std::string& path, uint64_t offset, uint8_t mask) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c = static_cast<char>(c ^ mask);
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

// Opens a tier, failing the test (and returning null) if it cannot.
inline std::unique_ptr<FlashTier> open_or_die(const FlashOptions& o) {
  auto tier = FlashTier::open(o);
  EXPECT_TRUE(tier.is_ok()) << tier.status().to_string();
  return tier.is_ok() ? std::move(*tier) : nullptr;
}

// Writes one chunk and waits for it to land. Retries while the tier is busy.
// A chunk 0 that does not say its count is taken as a whole object when its
// size says so, as the store's writes say: it is indexed compact.
inline Status write_sync(FlashTier& tier, ChunkWrite w) {
  if (w.chunk_index == 0 && w.chunk_count == 0 && w.object_size <= w.data.size()) {
    w.chunk_count = 1;
  }
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto done = std::make_shared<std::promise<Status>>();
    auto future = done->get_future();
    Status st = tier.write_chunk(w, [done](Status s) { done->set_value(std::move(s)); });
    if (st.code() == StatusCode::kBusy) {
      tier.flush();
      continue;
    }
    if (!st.is_ok()) return st;
    return future.get();
  }
  return Status::busy("still busy");
}

// Writes "cold<i>" records of `size` bytes, waiting for the reclaimer after
// each, until `until` holds (a hook of a reclaim round set it) or `most`
// records are written; returns whether it held.
inline bool write_cold_until(FlashTier& tier, size_t size, const bool& until, int most = 64) {
  for (int i = 0; i < most && !until; ++i) {
    const Status st = write_sync(
        tier, {.key = "cold" + std::to_string(i), .version = 1, .data = pattern(size, i)});
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok() || !tier.wait_for_reclaimer()) return false;
  }
  return until;
}

inline Result<std::string> read_sync(FlashTier& tier, std::string_view key, uint32_t chunk,
                                     std::optional<uint64_t> version = std::nullopt) {
  auto done = std::make_shared<std::promise<Result<std::string>>>();
  auto future = done->get_future();
  Status st = tier.read_chunk(key, chunk, version, [done](Result<FlashChunk> r) {
    if (r.is_ok()) {
      done->set_value(std::string(r->data()));
    } else {
      done->set_value(r.status());
    }
  });
  if (!st.is_ok()) return st;
  return future.get();
}

// Reads one chunk of `version` as a multi-chunk read does: with the
// locations (and region pins) `known` took when the read began.
inline Result<std::string> read_known(FlashTier& tier, std::string_view key, uint32_t chunk,
                                      uint64_t version, const FlashTier::VersionLocations* known) {
  auto done = std::make_shared<std::promise<Result<std::string>>>();
  auto future = done->get_future();
  tier.read_chunks(
      key, std::span(&chunk, 1), version,
      [done](uint32_t, Result<FlashChunk> r) {
        done->set_value(r.is_ok() ? Result<std::string>(std::string(r->data()))
                                  : Result<std::string>(r.status()));
      },
      known);
  return future.get();
}

}  // namespace tierkv::flash::testing
