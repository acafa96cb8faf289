// Helpers shared by the streaming tests: a small two-tier store, values put
// on flash only, and a blocking ranged read through Store::read().
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/store.h"
#include "store/store_tiers.h"
#include "store/stream/readahead.h"
#include "store/stream/stream_reader.h"
#include "tests/store/store_test_util.h"

namespace tierkv::testing {

inline constexpr size_t kChunk = 64 << 10;

inline Config stream_config(const TempDir& dir) {
  Config c;
  c.memory = 8 << 20;
  c.chunk_size = kChunk;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 128 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.dirty_max_fraction = 1;  // no background writeback: tests place data themselves
  return c;
}

// Values larger than half of large_value_config()'s memory: SET writes
// them past memory, to flash (FlashValueSink, FlashCopy tests).
inline constexpr size_t kLargeValue = 6 * kChunk + 4321;

inline Config large_value_config(const TempDir& dir) {
  Config c = stream_config(dir);
  c.memory = 512 << 10;
  return c;
}

// A kLargeValue value that starts with `tag`, so a mixed-up one shows.
inline std::string tagged_large_value(char tag) {
  std::string v = value_for(static_cast<uint64_t>(tag), kLargeValue);
  v[0] = tag;
  return v;
}

inline std::string stream_key(int i) {
  return "tile:" + std::to_string(i);
}

// Writes the keys to flash and drops them from memory: they are then on
// flash only (a clean memory copy is simply forgotten).
inline void to_flash_only(Store& store, const std::vector<std::string>& keys) {
  ASSERT_TRUE(store.persist_all().is_ok());
  for (const std::string& k : keys) StoreTiers::memory(store).remove(k);
  for (const std::string& k : keys) ASSERT_EQ(store.residency(k)->state, "flash") << k;
}

struct RangeRead {
  ReadStart::Where where = ReadStart::Where::kAbsent;
  Status status;
  std::string bytes;
  uint64_t chunks_issued = 0;
};

// Store::read() (or a stream's read()) made blocking. `posted`: for a
// consumer that posts each piece to its own thread's queue, as a connection
// does (asio): a piece handed out on the thread that started the read waits
// in that thread's private queue until the command's work is over, while one
// handed out on another thread is queued at once. Pieces must arrive in
// order all the same.
inline RangeRead read_blocking(const std::function<ReadStart(FlashReadCallbacks)>& start_read,
                               bool posted = false) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::thread::id caller;
    bool done = false;
    Status status;
    std::string own;    // handed out on the caller's thread, not yet queued
    std::string bytes;  // queued, in order
  };
  auto w = std::make_shared<Wait>();
  if (posted) w->caller = std::this_thread::get_id();
  FlashReadCallbacks cb;
  cb.on_piece = [w](ValuePiece p) {
    std::lock_guard lock(w->mu);
    (std::this_thread::get_id() == w->caller ? w->own : w->bytes).append(p.bytes);
  };
  cb.on_done = [w](Status st) {
    std::lock_guard lock(w->mu);
    w->status = std::move(st);
    w->done = true;
    w->cv.notify_all();
  };
  ReadStart r = start_read(std::move(cb));
  // The rest of the command's work on this thread, before its queue joins.
  if (posted) std::this_thread::sleep_for(std::chrono::microseconds(200));
  RangeRead out;
  out.where = r.where;
  if (r.where == ReadStart::Where::kMemory) {
    out.bytes = r.view.to_string();
    return out;
  }
  if (r.where == ReadStart::Where::kAbsent) return out;
  std::unique_lock lock(w->mu);
  // The private queue joins after what other threads queued meanwhile.
  w->bytes.append(std::exchange(w->own, std::string()));
  w->caller = std::thread::id();
  w->cv.wait(lock, [&] { return w->done; });
  out.status = w->status;
  out.bytes = w->bytes;
  if (r.flash_read) out.chunks_issued = r.flash_read->chunks_issued();
  return out;
}

inline RangeRead read_range(Store& store, const std::string& key, uint64_t offset, uint64_t length,
                            bool use_once) {
  return read_blocking([&](FlashReadCallbacks cb) {
    return store.read(
        key, offset, length, std::move(cb),
        ReadOptions{.window = ReadWindow{}, .use_once = use_once, .count_access = true});
  });
}

// `key` holds value_for(seed, size), on flash only.
inline void place_on_flash(Store& store, const std::string& key, uint64_t seed, size_t size) {
  ASSERT_TRUE(store.put(key, value_for(seed, size)));
  to_flash_only(store, {key});
}

// A ranged read through a Readahead, made blocking.
inline RangeRead readahead_read(Readahead& ra, const std::string& key, uint64_t offset,
                                uint64_t length) {
  return read_blocking(
      [&](FlashReadCallbacks cb) {
        return ra.read(
            key, offset, length, std::move(cb),
            ReadOptions{.window = ReadWindow{}, .use_once = false, .count_access = true});
      },
      /*posted=*/true);
}

// Polls `pred` every millisecond for up to `ms`.
inline bool eventually(const std::function<bool()>& pred, int ms = 5000) {
  for (int i = 0; i < ms; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace tierkv::testing
