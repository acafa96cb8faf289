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

#include "core/clock.h"
#include "flash/record.h"

namespace tierkv::bench {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t chunk_tag(uint64_t id, uint32_t chunk) {
  return id * 65536 + chunk;
}

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

// One random-read case. Every read's callback either issues the next read or,
// once time is up, retires its slot; run() waits for all slots to retire.
class ReadRunner {
 public:
  ReadRunner(flash::FlashTier& tier, const FillSpec& fill, const ReadSpec& spec)
      : tier_(tier), fill_(fill), spec_(spec) {}

  ReadResult run() {
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
    r.device_bytes =
        r.ops * flash::record_size(fill_.key_length, static_cast<uint64_t>(fill_.chunk_size));
    r.errors = errors_.load();
    r.cpu_seconds = cpu_end - cpu_begin;
    std::sort(latencies_.begin(), latencies_.end());
    if (!latencies_.empty()) {
      r.p50_ns = latencies_[latencies_.size() / 2];
      r.p99_ns = latencies_[std::min(latencies_.size() - 1, latencies_.size() * 99 / 100)];
      r.max_ns = latencies_.back();
    }
    return r;
  }

 private:
  // Issues one read; false (slot retired) if none could be issued.
  void issue() {
    for (int attempt = 0; attempt < 8; ++attempt) {
      const uint64_t pick = splitmix64(seq_.fetch_add(1, std::memory_order_relaxed));
      const uint64_t id = pick % fill_.objects;
      const auto chunk = static_cast<uint32_t>((pick >> 40) % fill_.chunks_per_object);
      const std::string key = object_key(id, fill_.key_length);
      const uint64_t issued_ns = mono_ns();
      Status st = tier_.read_chunk(key, chunk, std::nullopt,
                                   [this, id, chunk, issued_ns](Result<flash::FlashChunk> r) {
                                     on_done(chunk_tag(id, chunk), issued_ns, std::move(r));
                                   });
      if (st.is_ok()) return;
      errors_.fetch_add(1, std::memory_order_relaxed);
    }
    retire_slot();
  }

  void on_done(uint64_t expected_tag, uint64_t issued_ns, Result<flash::FlashChunk> r) {
    const uint64_t now = mono_ns();
    bool good = r.is_ok() && r->data().size() == fill_.chunk_size;
    if (good) {
      uint64_t tag = 0;
      std::memcpy(&tag, r->data().data(), sizeof(tag));
      good = tag == expected_tag;
    }
    if (!good) {
      errors_.fetch_add(1, std::memory_order_relaxed);
    } else if (now >= measure_begin_ && now < measure_end_) {
      ops_.fetch_add(1, std::memory_order_relaxed);
      payload_bytes_.fetch_add(r->data().size(), std::memory_order_relaxed);
      std::lock_guard lock(latency_mu_);
      latencies_.push_back(now - issued_ns);
    }
    if (now < measure_end_) {
      issue();
    } else {
      retire_slot();
    }
  }

  void retire_slot() {
    std::lock_guard lock(mu_);
    if (--active_slots_ == 0) slots_retired_.notify_all();
  }

  flash::FlashTier& tier_;
  const FillSpec fill_;
  const ReadSpec spec_;
  uint64_t measure_begin_ = 0;
  uint64_t measure_end_ = 0;
  std::atomic<uint64_t> seq_{1};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> payload_bytes_{0};
  std::atomic<uint64_t> errors_{0};
  std::mutex latency_mu_;
  std::vector<uint64_t> latencies_;
  std::mutex mu_;
  std::condition_variable slots_retired_;
  uint32_t active_slots_ = 0;
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

uint64_t objects_that_fit(const flash::FlashTier& tier, const FillSpec& spec) {
  const uint64_t record = flash::record_size(spec.key_length, spec.chunk_size);
  const uint64_t region_size = tier.capacity() / tier.stats().regions;
  const uint64_t per_region = (region_size - flash::kBlockSize) / record;
  const uint64_t chunks = (tier.stats().regions - 1) * per_region;
  return chunks / spec.chunks_per_object;
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
  std::string data(spec.chunk_size, '\0');
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(data.data() + i, &v, 8);
  }
  LandingCounter counter;
  auto on_landed = [&counter](Status st) { counter.landed(st); };

  FillResult result;
  uint64_t issued = 0;
  Status error;
  const uint64_t start = mono_ns();
  for (uint64_t id = 0; id < spec.objects && error.is_ok(); ++id) {
    const std::string key = object_key(id, spec.key_length);
    for (uint32_t c = 0; c < spec.chunks_per_object && error.is_ok(); ++c) {
      const uint64_t tag = chunk_tag(id, c);
      std::memcpy(data.data(), &tag, std::min<size_t>(sizeof(tag), data.size()));
      flash::ChunkWrite w{.key = key,
                          .chunk_index = c,
                          .version = 1,
                          .object_size = spec.chunk_size * spec.chunks_per_object,
                          .chunk_count = spec.chunks_per_object,
                          .data = data};
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

ReadResult random_reads(flash::FlashTier& tier, const FillSpec& fill_spec, const ReadSpec& spec) {
  ReadRunner runner(tier, fill_spec, spec);
  return runner.run();
}

}  // namespace tierkv::bench
