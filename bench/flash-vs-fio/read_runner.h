// The phases of tierkv-flash-bench: filling with same-sized objects, and
// random reads of them with a fixed number in flight. Reads go either
// through tierkv::Store (the product path) or straight to the FlashTier.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "flash/flash_tier.h"

namespace tierkv::bench {

// Object `id`'s key: a fixed-length hex name, so every record has the same
// size whatever the id.
std::string object_key(uint64_t id, uint32_t key_length);

// The first 8 bytes of chunk `chunk` of object `id`, so reads can check they
// got the bytes they asked for.
uint64_t chunk_tag(uint64_t id, uint32_t chunk);

struct FillSpec {
  uint64_t chunk_size = 4096;  // bytes per chunk (the last one is full too)
  uint32_t chunks_per_object = 1;
  uint32_t key_length = 24;
  uint64_t objects = 0;
  uint64_t object_size() const { return chunk_size * chunks_per_object; }
};

struct FillResult {
  uint64_t objects = 0;
  uint64_t chunks = 0;
  uint64_t payload_bytes = 0;
  uint64_t busy_retries = 0;
  uint64_t write_errors = 0;
  double seconds = 0;
};

// How many objects fit in `regions` regions of `tier` (no reclaim).
uint64_t objects_that_fit(const flash::FlashTier& tier, const FillSpec& spec, uint64_t regions);

// Writes spec.objects objects through write_chunk and waits for them to land.
Result<FillResult> fill(flash::FlashTier& tier, const FillSpec& spec);

// One object's bytes: random, with chunk_tag() at the start of every chunk.
void fill_object(std::string& value, const FillSpec& spec, uint64_t id);

struct ReadSpec {
  uint32_t queue_depth = 1;
  double seconds = 5;
  double warmup_seconds = 0.5;  // run but not counted, like fio's ramp_time
};

struct ReadResult {
  uint32_t queue_depth = 0;
  double seconds = 0;  // measured window
  uint64_t ops = 0;
  uint64_t payload_bytes = 0;  // object bytes handed to callbacks
  uint64_t device_bytes = 0;   // whole records read (header, key, padding)
  uint64_t errors = 0;         // misses, I/O errors, wrong bytes
  uint64_t memory_hits = 0;    // reads answered from memory (should be 0)
  double cpu_seconds = 0;      // process user+system CPU in the window
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

// Uniformly random reads of the filled objects, exactly spec.queue_depth
// outstanding: each completion issues the next read until time is up.
// Subclasses say how one read is started.
class RandomReader {
 public:
  RandomReader(const FillSpec& fill, const ReadSpec& spec) : fill_(fill), spec_(spec) {}
  virtual ~RandomReader() = default;
  ReadResult run();

 protected:
  // Starts reading chunk `chunk` of object `id` (the whole object when the
  // reader reads objects). On OK, finish() must follow exactly once, maybe
  // before this returns.
  virtual Status start_read(uint64_t id, uint32_t chunk, uint64_t issued_ns) = 0;
  virtual uint64_t device_bytes_per_read() const = 0;
  void finish(uint64_t issued_ns, uint64_t payload_bytes, bool good, bool from_memory = false);

  const FillSpec fill_;

 private:
  void issue();
  void retire_slot();

  const ReadSpec spec_;
  uint64_t measure_begin_ = 0;
  uint64_t measure_end_ = 0;
  std::atomic<uint64_t> seq_{1};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> payload_bytes_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> memory_hits_{0};
  std::mutex latency_mu_;
  std::vector<uint64_t> latencies_;
  std::mutex mu_;
  std::condition_variable slots_retired_;
  uint32_t active_slots_ = 0;
};

// Reads chunks straight from the FlashTier (read_chunk), no Store.
ReadResult random_tier_reads(flash::FlashTier& tier, const FillSpec& fill, const ReadSpec& spec);

}  // namespace tierkv::bench
