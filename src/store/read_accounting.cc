#include "store/read_accounting.h"

#include <utility>

#include "core/hash.h"

namespace tierkv {

ReadAccounting::ReadAccounting(MetricsRegistry& metrics, const SizingOptions& sizing, Charge charge)
    : hits_(metrics.counter("tierkv_keyspace_hits_total", "reads that found the key")),
      misses_(metrics.counter("tierkv_keyspace_misses_total", "reads that missed")),
      flash_hits_(metrics.counter("tierkv_flash_hits_total", "reads answered from flash")),
      curves_(sizing),
      charge_(std::move(charge)) {}

void ReadAccounting::hit(std::string_view key, uint64_t object_size) {
  hits_.add();
  if (!curves_.enabled()) return;
  const uint64_t h = hash64(key);
  // Every read counts toward the curves' total; only a sampled key's
  // charge is worked out.
  curves_.read(h, curves_.samples(h) ? charge_(key.size(), object_size) : 0);
}

void ReadAccounting::miss(std::string_view key) {
  misses_.add();
  // The size is not known: the client's write after the miss fills it.
  if (curves_.enabled()) curves_.read(hash64(key), 0);
}

void ReadAccounting::write(std::string_view key, uint64_t object_size) {
  if (!curves_.enabled()) return;
  const uint64_t h = hash64(key);
  if (curves_.samples(h)) curves_.write(h, charge_(key.size(), object_size));
}

void ReadAccounting::remove(std::string_view key) {
  if (curves_.enabled()) curves_.remove(hash64(key));
}

}  // namespace tierkv
