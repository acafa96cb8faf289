#include "read_runner.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/splitmix64.h"
#include "core/clock.h"
#include "flash/record.h"

namespace tierkv::bench {
namespace {

double cpu_seconds_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

void sleep_until_ns(uint64_t deadline_ns) {
  const uint64_t now = mono_ns();
  if (deadline_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(deadline_ns - now));
}

class TierReader : public RandomReader {
 public:
  TierReader(flash::FlashTier& tier, const FillSpec& fill, const ReadSpec& spec)
      : RandomReader(fill, spec), tier_(tier) {}

 protected:
  Status start_read(uint64_t id, uint32_t chunk, uint64_t issued_ns) override {
    const std::string key = object_key(id, fill_.key_length);
    return tier_.read_chunk(key, chunk, std::nullopt,
                            [this, id, chunk, issued_ns](Result<flash::FlashChunk> r) {
                              bool good = r.is_ok() && r->data().size() == fill_.chunk_size;
                              if (good) {
                                uint64_t tag = 0;
                                std::memcpy(&tag, r->data().data(), sizeof(tag));
                                good = tag == chunk_tag(id, chunk);
                              }
                              finish(issued_ns, good ? r->data().size() : 0, good);
                            });
  }
  uint64_t device_bytes_per_read() const override {
    return flash::record_size(fill_.key_length, fill_.chunk_size);
  }

 private:
  flash::FlashTier& tier_;
};

}  // namespace

std::string object_key(uint64_t id, uint32_t key_length) {
  // Formatted by hand: snprintf showed up in the read path's profile.
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key = "obj:";
  for (int shift = 60; shift >= 0; shift -= 4) key += kHex[(id >> shift) & 15];
  key.resize(std::max<size_t>(key_length, key.size()), '.');
  return key;
}

uint64_t chunk_tag(uint64_t id, uint32_t chunk) {
  return id * 65536 + chunk;
}

uint64_t objects_that_fit(const flash::FlashTier& tier, const FillSpec& spec, uint64_t regions) {
  const uint64_t record = flash::record_size(spec.key_length, spec.chunk_size);
  const uint64_t region_size = tier.capacity() / tier.stats().regions;
  const uint64_t per_region = (region_size - kBlockSize) / record;
  return regions * per_region / spec.chunks_per_object;
}

void fill_object(std::string& value, const FillSpec& spec, uint64_t id) {
  if (value.size() != spec.object_size()) {
    value.assign(spec.object_size(), '\0');
    std::mt19937_64 rng(42);
    for (size_t i = 0; i + 8 <= value.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(value.data() + i, &v, 8);
    }
  }
  for (uint32_t c = 0; c < spec.chunks_per_object; ++c) {
    const uint64_t tag = chunk_tag(id, c);
    std::memcpy(value.data() + c * spec.chunk_size, &tag,
                std::min<size_t>(sizeof(tag), spec.chunk_size));
  }
}

// Counts write callbacks. Everything happens under the mutex, so once the
// waiter has seen the last one, no callback touches this object again.
class LandingCounter {
 public:
  void landed(const Status& st) {
    std::lock_guard lock(mu_);
    if (!st.is_ok()) ++failed_;
    ++landed_;
    cv_.notify_all();
  }
  // Waits until `issued` callbacks ran; returns how many failed.
  uint64_t wait_for(uint64_t issued) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return landed_ == issued; });
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t landed_ = 0;
  uint64_t failed_ = 0;
};

Result<FillResult> fill(flash::FlashTier& tier, const FillSpec& spec) {
  std::string value;
  LandingCounter counter;
  auto on_landed = [&counter](Status st) { counter.landed(st); };

  FillResult result;
  uint64_t issued = 0;
  Status error;
  const uint64_t start = mono_ns();
  for (uint64_t id = 0; id < spec.objects && error.is_ok(); ++id) {
    const std::string key = object_key(id, spec.key_length);
    fill_object(value, spec, id);
    for (uint32_t c = 0; c < spec.chunks_per_object && error.is_ok(); ++c) {
      flash::ChunkWrite w{
          .key = key,
          .chunk_index = c,
          .version = 1,
          .object_size = spec.chunk_size * spec.chunks_per_object,
          .chunk_count = spec.chunks_per_object,
          .data = std::string_view(value).substr(c * spec.chunk_size, spec.chunk_size)};
      for (;;) {
        Status st = tier.write_chunk(w, on_landed);
        if (st.is_ok()) {
          ++issued;
          break;
        }
        if (st.code() != StatusCode::kBusy) {
          error = std::move(st);
          break;
        }
        ++result.busy_retries;  // the write queue is full: let it drain
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  // Accepted writes call back into `counter` even after an error.
  tier.flush();
  result.write_errors = counter.wait_for(issued);
  if (!error.is_ok()) return error;
  result.seconds = double(mono_ns() - start) / 1e9;
  result.objects = spec.objects;
  result.chunks = issued;
  result.payload_bytes = issued * spec.chunk_size;
  return result;
}

ReadResult RandomReader::run() {
  const uint64_t start = mono_ns();
  measure_begin_ = start + static_cast<uint64_t>(spec_.warmup_seconds * 1e9);
  measure_end_ = measure_begin_ + static_cast<uint64_t>(spec_.seconds * 1e9);
  latencies_.reserve(1 << 16);
  active_slots_ = spec_.queue_depth;
  for (uint32_t i = 0; i < spec_.queue_depth; ++i) issue();

  sleep_until_ns(measure_begin_);
  const double cpu_begin = cpu_seconds_now();
  sleep_until_ns(measure_end_);
  const double cpu_end = cpu_seconds_now();
  {
    std::unique_lock lock(mu_);
    slots_retired_.wait(lock, [&] { return active_slots_ == 0; });
  }

  ReadResult r;
  r.queue_depth = spec_.queue_depth;
  r.seconds = spec_.seconds;
  r.ops = ops_.load();
  r.payload_bytes = payload_bytes_.load();
  r.device_bytes = r.ops * device_bytes_per_read();
  r.errors = errors_.load();
  r.memory_hits = memory_hits_.load();
  r.cpu_seconds = cpu_end - cpu_begin;
  std::sort(latencies_.begin(), latencies_.end());
  if (!latencies_.empty()) {
    r.p50_ns = latencies_[latencies_.size() / 2];
    r.p99_ns = latencies_[std::min(latencies_.size() - 1, latencies_.size() * 99 / 100)];
    r.max_ns = latencies_.back();
  }
  return r;
}

// Issues one read, or retires the slot if none could be issued.
void RandomReader::issue() {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const uint64_t pick = splitmix64(seq_.fetch_add(1, std::memory_order_relaxed));
    const uint64_t id = pick % fill_.objects;
    const auto chunk = static_cast<uint32_t>((pick >> 40) % fill_.chunks_per_object);
    if (start_read(id, chunk, mono_ns()).is_ok()) return;
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
  retire_slot();
}

void RandomReader::finish(uint64_t issued_ns, uint64_t payload_bytes, bool good, bool from_memory) {
  const uint64_t now = mono_ns();
  if (!good) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else if (now >= measure_begin_ && now < measure_end_) {
    ops_.fetch_add(1, std::memory_order_relaxed);
    payload_bytes_.fetch_add(payload_bytes, std::memory_order_relaxed);
    if (from_memory) memory_hits_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(latency_mu_);
    latencies_.push_back(now - issued_ns);
  }
  if (now < measure_end_) {
    issue();
  } else {
    retire_slot();
  }
}

void RandomReader::retire_slot() {
  std::lock_guard lock(mu_);
  if (--active_slots_ == 0) slots_retired_.notify_all();
}

ReadResult random_tier_reads(flash::FlashTier& tier, const FillSpec& fill, const ReadSpec& spec) {
  TierReader reader(tier, fill, spec);
  return reader.run();
}

}  // namespace tierkv::bench
