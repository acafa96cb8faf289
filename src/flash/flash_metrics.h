// The flash tier's metrics, registered in the MetricsRegistry given to
// FlashTier::open (tierkv_flash_*). Internal to the flash tier.
#pragma once

#include "core/metrics.h"

namespace tierkv::flash {

struct FlashMetrics {
  explicit FlashMetrics(MetricsRegistry& r);
  Gauge& bytes_used;
  Gauge& bytes_free;
  Gauge& records;
  Gauge& objects;
  Gauge& regions;
  Gauge& regions_used;
  Gauge& index_bytes;
  Gauge& write_amplification_permille;
  Counter& reclaims;
  Counter& reclaim_index_walks;
  Counter& reclaim_region_reads;
  Gauge& regions_draining;
  Counter& reinsertions;
  Counter& reads;
  Counter& page_cache_reads;
  Counter& read_bytes;
  Counter& read_misses;
  Counter& read_races;
  Histogram& read_latency;
  Counter& device_write_bytes;
  Counter& user_write_bytes;
  Counter& checksum_failures;
  Counter& key_collisions;
  Counter& write_errors;
  Counter& read_errors;
  Counter& recovered_records;
  Counter& recovery_dropped_records;
  Counter& fsyncs;
};

}  // namespace tierkv::flash
