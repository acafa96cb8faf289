// The two phases of tierkv-flash-bench: filling a FlashTier with same-sized
// objects, and random reads of them with a fixed number in flight.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "flash/flash_tier.h"

namespace tierkv::bench {

// Object `id`'s key: a fixed-length hex name, so every record has the same
// size whatever the id.
std::string object_key(uint64_t id, uint32_t key_length);

struct FillSpec {
  uint64_t chunk_size = 4096;
  uint32_t chunks_per_object = 1;
  uint32_t key_length = 24;
  uint64_t objects = 0;
};

struct FillResult {
  uint64_t objects = 0;
  uint64_t chunks = 0;
  uint64_t payload_bytes = 0;
  uint64_t busy_retries = 0;
  uint64_t write_errors = 0;
  double seconds = 0;
};

// How many objects fit without reclaiming a region: every region but one,
// so the fill never wraps the log.
uint64_t objects_that_fit(const flash::FlashTier& tier, const FillSpec& spec);

// Writes spec.objects objects through write_chunk and waits for them to land.
// Chunk c of object `id` starts with the 8 bytes of id * 65536 + c, so reads
// can check they got the chunk they asked for.
Result<FillResult> fill(flash::FlashTier& tier, const FillSpec& spec);

struct ReadSpec {
  uint32_t queue_depth = 1;
  double seconds = 5;
  double warmup_seconds = 0.5;  // run but not counted, like fio's ramp_time
};

struct ReadResult {
  uint32_t queue_depth = 0;
  double seconds = 0;  // measured window
  uint64_t ops = 0;
  uint64_t payload_bytes = 0;  // chunk data handed to callbacks
  uint64_t device_bytes = 0;   // whole records read (header, key, padding)
  uint64_t errors = 0;         // misses, I/O errors, wrong bytes
  double cpu_seconds = 0;      // process user+system CPU in the window
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

// Reads uniformly random chunks of the filled objects through read_chunk,
// keeping exactly spec.queue_depth reads outstanding: each callback issues
// the next read until time is up.
ReadResult random_reads(flash::FlashTier& tier, const FillSpec& fill_spec, const ReadSpec& spec);

}  // namespace tierkv::bench
