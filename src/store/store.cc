#include "store/store.h"

#include <fmt/format.h>

namespace tierkv {
namespace {

MetricsRegistry* pick_registry(std::unique_ptr<MetricsRegistry>& owned, MetricsRegistry* given) {
  if (given) return given;
  owned = std::make_unique<MetricsRegistry>();
  return owned.get();
}

memory::MemoryTierOptions memory_options(const Config& c) {
  memory::MemoryTierOptions o;
  o.budget_bytes = c.memory;
  o.chunk_size = static_cast<uint32_t>(c.chunk_size);
  o.policy = memory::parse_policy(c.eviction_policy).value_or(memory::PolicyKind::kS3Fifo);
  o.shards = static_cast<uint32_t>(c.memory_shards);
  o.lease_max_fraction = c.lease_max_fraction;
  return o;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const Config& config, MetricsRegistry* metrics) {
  TIERKV_RETURN_IF_ERROR(config_validate(config));
  if (!memory::parse_policy(config.eviction_policy))
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'eviction-policy'", config.eviction_policy));
  std::unique_ptr<Store> store(new Store(config, metrics));
  store->memory_->start_active_expiry(static_cast<int>(config.active_expire_hz));
  return store;
}

Store::Store(const Config& config, MetricsRegistry* metrics)
    : metrics_(pick_registry(owned_metrics_, metrics)),
      memory_(std::make_unique<memory::MemoryTier>(memory_options(config))),
      max_key_size_(config.max_key_size),
      max_object_size_(config.max_object_size),
      hits_(metrics_->counter("tierkv_keyspace_hits_total", "reads that found the key")),
      misses_(metrics_->counter("tierkv_keyspace_misses_total", "reads that missed")) {}

Store::~Store() = default;

void Store::set_limits(int64_t max_key_size, int64_t max_object_size) {
  max_key_size_.store(max_key_size);
  max_object_size_.store(max_object_size);
}

Status Store::check_key(std::string_view key) const {
  if (static_cast<int64_t>(key.size()) > max_key_size_.load(std::memory_order_relaxed))
    return Status::too_large(
        fmt::format("key of {} bytes exceeds max-key-size ({})", key.size(), max_key_size_.load()));
  return Status::ok();
}

Status Store::check_size(uint64_t size) const {
  if (size > static_cast<uint64_t>(max_object_size_.load(std::memory_order_relaxed)))
    return Status::too_large(fmt::format("value of {} bytes exceeds max-object-size ({})", size,
                                         max_object_size_.load()));
  return Status::ok();
}

Result<WriteResult> Store::put(std::string_view key, std::string_view value,
                               const WriteOptions& options) {
  TIERKV_RETURN_IF_ERROR(check_key(key));
  TIERKV_RETURN_IF_ERROR(check_size(value.size()));
  return memory_->put(key, value, options);
}

Result<ObjectWriter> Store::begin_put(std::string_view key, uint64_t size) {
  TIERKV_RETURN_IF_ERROR(check_key(key));
  TIERKV_RETURN_IF_ERROR(check_size(size));
  return memory_->prepare(key, size);
}

Result<WriteResult> Store::commit(ObjectWriter&& writer, const WriteOptions& options) {
  return memory_->publish(std::move(writer), options);
}

std::vector<Result<WriteResult>> Store::put_batch(
    std::span<const std::pair<std::string_view, std::string_view>> items,
    const WriteOptions& options) {
  std::vector<Result<WriteResult>> out;
  out.reserve(items.size());
  for (const auto& [k, v] : items) out.push_back(put(k, v, options));
  return out;
}

Result<ObjectView> Store::get(std::string_view key) {
  return get_range(key, 0, UINT64_MAX);
}

Result<ObjectView> Store::get_range(std::string_view key, uint64_t offset, uint64_t length) {
  Result<ObjectView> v = memory_->get(key, GetOptions{.offset = offset, .length = length});
  (v ? hits_ : misses_).add();
  return v;
}

std::vector<Result<ObjectView>> Store::get_batch(std::span<const std::string_view> keys) {
  std::vector<Result<ObjectView>> out;
  out.reserve(keys.size());
  for (std::string_view k : keys) out.push_back(get(k));
  return out;
}

std::vector<bool> Store::exist(std::span<const std::string_view> keys, const ExistOptions&) {
  // prefetch_to_memory has nothing to promote until a lower tier exists.
  std::vector<bool> out;
  out.reserve(keys.size());
  for (std::string_view k : keys) out.push_back(memory_->contains(k));
  return out;
}

bool Store::remove(std::string_view key, std::optional<uint64_t> if_version) {
  return memory_->remove(key, if_version);
}

size_t Store::remove_batch(std::span<const std::string_view> keys) {
  size_t n = 0;
  for (std::string_view k : keys) n += memory_->remove(k) ? 1 : 0;
  return n;
}

bool Store::set_expiry(std::string_view key, int64_t expire_at_ms) {
  return memory_->set_expiry(key, expire_at_ms);
}

std::optional<ObjectInfo> Store::stat(std::string_view key) {
  return memory_->stat(key);
}

StoreStats Store::stats() const {
  StoreStats s;
  s.memory = memory_->stats();
  s.hits = hits_.value();
  s.misses = misses_.value();
  return s;
}

}  // namespace tierkv
