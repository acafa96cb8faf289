// tierkv::Store: the embedded C++ API of tierkv.
//
//   auto store = tierkv::Store::open(tierkv::Config{});
//   (*store)->put("k", "value");
//   auto view = (*store)->get("k");     // pinned scatter list, no copy
//   view->for_each_segment([](std::string_view s) { ... });
//
// Values are stored as chunks (Config::chunk_size). get() returns an
// ObjectView that pins the chunks of exactly one version: a concurrent
// overwrite or eviction cannot tear or free what the view shows. Copy out
// with ObjectView::append_to() (one copy) or send the segments directly
// (zero copies). Views must not outlive the Store.
//
// All methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/metrics.h"
#include "core/status.h"
#include "memory/memory_tier.h"

namespace tierkv {

using memory::GetOptions;
using memory::ObjectInfo;
using memory::ObjectView;
using memory::ObjectWriter;
using memory::ScanPage;
using memory::WriteCondition;
using memory::WriteOptions;
using memory::WriteResult;

struct ExistOptions {
  // Treat the probe as "will read soon": start promoting flash-resident
  // chunks into memory without waiting for them. This takes effect once the
  // flash tier exists; with memory only, every present object is already in
  // memory and the flag changes nothing. The answer is never delayed by it.
  bool prefetch_to_memory = false;
};

struct StoreStats {
  memory::MemoryTierStats memory;
  uint64_t hits = 0;
  uint64_t misses = 0;
};

class Store {
 public:
  // Opens a store configured by `config` (validated). Metrics go to
  // `metrics` if given, else to a registry the store owns.
  static Result<std::unique_ptr<Store>> open(const Config& config,
                                             MetricsRegistry* metrics = nullptr);
  ~Store();

  // --- writes ---
  Result<WriteResult> put(std::string_view key, std::string_view value,
                          const WriteOptions& options = {});
  // Streaming write for large values: reserve, fill in place, then commit.
  // Nothing is visible until commit; an uncommitted writer frees its memory.
  Result<ObjectWriter> begin_put(std::string_view key, uint64_t size);
  Result<WriteResult> commit(ObjectWriter&& writer, const WriteOptions& options = {});
  std::vector<Result<WriteResult>> put_batch(
      std::span<const std::pair<std::string_view, std::string_view>> items,
      const WriteOptions& options = {});

  // --- reads ---
  Result<ObjectView> get(std::string_view key);
  // Bytes [offset, offset + length) clipped to the object; NotFound if absent.
  Result<ObjectView> get_range(std::string_view key, uint64_t offset, uint64_t length);
  std::vector<Result<ObjectView>> get_batch(std::span<const std::string_view> keys);
  // One answer per key, in order. Never blocks on I/O, with or without prefetch.
  std::vector<bool> exist(std::span<const std::string_view> keys, const ExistOptions& options = {});
  bool exists(std::string_view key) { return exist(std::span(&key, 1))[0]; }

  // --- removal and key space ---
  // With if_version, removes only that version: a compare-and-delete for
  // read-modify-write commands (GETDEL, rollbacks).
  bool remove(std::string_view key, std::optional<uint64_t> if_version = std::nullopt);
  size_t remove_batch(std::span<const std::string_view> keys);
  // Unix ms; 0 clears. False if absent.
  bool set_expiry(std::string_view key, int64_t expire_at_ms);
  std::optional<ObjectInfo> stat(std::string_view key);
  ScanPage scan(uint64_t cursor, size_t count) { return memory_->scan(cursor, count); }
  std::optional<std::string> random_key() { return memory_->random_key(); }
  uint64_t size() const { return memory_->object_count(); }
  void flush() { memory_->clear(); }

  // --- administration ---
  Status set_memory_budget(int64_t bytes) { return memory_->set_budget(bytes); }
  void set_limits(int64_t max_key_size, int64_t max_object_size);
  StoreStats stats() const;
  MetricsRegistry& metrics() { return *metrics_; }
  memory::MemoryTier& memory_tier() { return *memory_; }

 private:
  Store(const Config& config, MetricsRegistry* metrics);
  Status check_key(std::string_view key) const;
  Status check_size(uint64_t size) const;

  std::unique_ptr<MetricsRegistry> owned_metrics_;
  MetricsRegistry* metrics_;
  std::unique_ptr<memory::MemoryTier> memory_;
  std::atomic<int64_t> max_key_size_;
  std::atomic<int64_t> max_object_size_;
  Counter& hits_;
  Counter& misses_;
};

}  // namespace tierkv
