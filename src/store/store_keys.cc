// Store: the key space across both tiers (SCAN, RANDOMKEY, DBSIZE), object
// residency, and statistics.
#include <absl/container/flat_hash_set.h>

#include <algorithm>

#include "core/hash.h"
#include "flash/flash_tier.h"
#include "store/flashio/buffer_budget.h"
#include "store/flashio/flash_reader.h"
#include "store/flashio/writeback.h"
#include "store/promotion/promoter.h"
#include "store/store.h"
#include "store/worker_pool.h"

namespace tierkv {

std::optional<ObjectResidency> Store::residency(std::string_view key) {
  std::optional<ObjectInfo> mem = memory_->stat(key);
  std::optional<flash::FlashObjectInfo> below;
  if (flash_) below = flash_->lookup(key);
  ObjectResidency r;
  if (mem) {
    r.version = mem->version;
    r.size = mem->size;
    r.expire_at_ms = mem->expire_at_ms;
    r.in_memory = true;
    r.state = memory::flash_state_name(mem->flash_state);
    // Every chunk of the object: memory lists those it holds (all of them,
    // unless the object is clean and held in part).
    const uint64_t cs = memory_->chunk_size();
    const uint32_t count = mem->size == 0 ? 1 : static_cast<uint32_t>((mem->size + cs - 1) / cs);
    r.chunks.resize(count);
    for (uint32_t i = 0; i < count; ++i) {
      r.chunks[i].index = i;
      r.chunks[i].size = static_cast<uint32_t>(
          std::min<uint64_t>(cs, mem->size - std::min<uint64_t>(mem->size, i * cs)));
    }
    for (const memory::ChunkInfo& c : mem->chunks) {
      r.chunks[c.index] = ChunkResidency{.index = c.index,
                                         .size = c.size,
                                         .in_memory = true,
                                         .on_flash = false,
                                         .pins = c.pins,
                                         .leased = c.leased,
                                         .use_once = c.use_once};
    }
    if (below && below->version == mem->version) {
      for (ChunkResidency& c : r.chunks)
        c.on_flash = std::binary_search(below->chunks.begin(), below->chunks.end(), c.index);
    }
    return r;
  }
  std::optional<ObjectInfo> f = flash_ ? flash_info(key) : std::nullopt;
  if (!f) return std::nullopt;
  r.version = f->version;
  r.size = f->size;
  r.expire_at_ms = f->expire_at_ms;
  r.state = "flash";
  for (const memory::ChunkInfo& c : f->chunks)
    r.chunks.push_back(ChunkResidency{.index = c.index, .size = c.size, .on_flash = true});
  return r;
}

// Both tiers are walked in the same order, by key hash: a page covers the
// hash range [cursor, end) where both walks are complete. Memory's page and
// a bounded page of the flash index (at most `count` keys) each end
// somewhere; the page ends at the nearer of the two, so one cursor serves
// both tiers and neither walk copies more than a page.
ScanPage Store::scan(uint64_t cursor, size_t count) {
  ScanPage page = memory_->scan(cursor, count);
  if (!flash_ || flash_->object_count() == 0) return page;
  uint64_t flash_end = 0;  // 0: to the end of the hash space
  std::vector<std::string> below = flash_->keys_from(cursor, count, &flash_end);
  uint64_t mem_end = page.next_cursor;
  uint64_t end = mem_end == 0 ? flash_end : flash_end == 0 ? mem_end : std::min(mem_end, flash_end);
  auto past_end = [end](std::string_view k) { return end != 0 && hash64(k) >= end; };
  // Memory keys past the end come again on the next page.
  if (end != mem_end) std::erase_if(page.keys, past_end);
  // Skip what the memory walk already reported (objects in both tiers, and
  // ones whose offload lands meanwhile), but not keys promoted since it ran:
  // asking memory again would lose them.
  absl::flat_hash_set<std::string> in_page(page.keys.begin(), page.keys.end());
  for (std::string& k : below) {
    if (past_end(k) || in_page.contains(k) || !flash_info(k)) continue;
    page.keys.push_back(std::move(k));
  }
  page.next_cursor = end;
  return page;
}

bool Store::key_walks_read_flash() const {
  return !loading() && flash_ && flash_->compact_object_count() > 0;
}

void Store::run_key_walk(std::function<void(bool run)> walk) {
  WorkerPool* pool = loading() ? nullptr : pool_.get();
  if (pool == nullptr || !pool->try_submit(walk)) walk(false);
}

std::optional<std::string> Store::random_key() {
  std::optional<std::string> k = memory_->random_key();
  if (k || !flash_) return k;
  return flash_->random_key();
}

uint64_t Store::size() const {
  uint64_t n = memory_->object_count();
  if (!flash_) return n;
  // Objects in memory that are also on flash (clean) would count twice.
  memory::MemoryTierStats st = memory_->stats();
  uint64_t below = flash_->object_count();
  return n + (below > st.clean_objects ? below - st.clean_objects : 0);
}

HistogramSnapshot Store::flash_read_latency() const {
  // The histogram the flash tier records into (empty without flash).
  return metrics_->latency("tierkv_flash_read_latency", "Chunk read latency").snapshot();
}

StoreStats Store::stats() const {
  StoreStats s;
  s.memory = memory_->stats();
  s.hits = reads_.hits();
  s.misses = reads_.misses();
  s.flash_hits = reads_.flash_hits();
  s.flash_write_buffer_used = write_buffers_->used();
  s.flash_write_buffer_limit = write_buffers_->limit();
  s.flash_write_buffer_waits = write_buffers_->waits();
  // The loader thread creates the flash parts below; loaded_ (released
  // after them) is what makes them safe to read from this thread.
  if (loading()) return s;
  if (reader_) {
    s.flash_read_buffer_used = reader_->budget().used();
    s.flash_read_buffer_limit = reader_->budget().limit();
    s.flash_read_buffer_waits = reader_->budget().waits();
  }
  if (writeback_) {
    s.writeback_inflight_bytes = writeback_->inflight_bytes();
    s.writeback_objects = writeback_->objects_written();
    s.writeback_bytes = writeback_->bytes_written();
  }
  if (promoter_) {
    Promoter::Counts p = promoter_->counts();
    s.promotions_attempted = p.attempted;
    s.promotions_done = p.done;
    s.promotions_failed = p.failed;
  }
  if (flash_) {
    s.flash = flash_->stats();
    s.recovery = flash_->recovery();
  }
  return s;
}

}  // namespace tierkv
