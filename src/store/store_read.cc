// Store: reads, and the key space seen across both tiers.
#include <fmt/format.h>

#include "core/clock.h"
#include "core/hash.h"
#include "core/mutex.h"
#include "core/status_join.h"
#include "flash/flash_tier.h"
#include "store/flashio/buffer_budget.h"
#include "store/flashio/flash_reader.h"
#include "store/prefetch/prefetcher.h"
#include "store/promotion/promoter.h"
#include "store/store.h"

namespace tierkv {

struct HeldRead {
  std::string key;
  flash::FlashObjectSummary info;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<memory::ChunkPin> resident;
  std::optional<flash::FlashTier::VersionLocations> where;
  bool started = false;
};

namespace {

bool expired_at(int64_t expire_at_ms) {
  return expire_at_ms != 0 && expire_at_ms <= unix_time_ms();
}

Status fetch_status(PromotionOutcome outcome) {
  switch (outcome) {
    case PromotionOutcome::kSaturated:
      return Status::out_of_memory("no memory free to load the value from flash");
    case PromotionOutcome::kIoError:
      return Status::io_error("flash read failed while loading the value");
    case PromotionOutcome::kCancelled:
      return Status::unavailable("store closing");
    default:
      return Status::ok();
  }
}

// Whether [offset, offset + length), clamped to the object, lies in one chunk.
bool within_one_chunk(uint64_t offset, uint64_t length, uint64_t object_size, uint64_t chunk) {
  const uint64_t first = std::min(offset, object_size);
  const uint64_t last = first + std::min(length, object_size - first);
  return last <= first || (last - 1) / chunk == first / chunk;
}

}  // namespace

// The flash copy of a key that memory does not hold, if it is whole and
// live. An expired or incomplete one (a chunk's region was reclaimed) is
// removed on the way, so that later probes are cheap.
static std::optional<flash::FlashObjectSummary> live_flash_object(flash::FlashTier& flash,
                                                                  const FlashReader& reader,
                                                                  std::string_view key) {
  std::optional<flash::FlashObjectSummary> info = flash.summary(key);
  if (!info) return std::nullopt;
  if (expired_at(info->expire_at_ms) ||
      info->readable_chunks != reader.chunk_count(info->object_size)) {
    flash.forget(key, info->version + 1);
    return std::nullopt;
  }
  return info;
}

// What a live flash summary says, without the chunk list.
static ObjectInfo brief_info(const flash::FlashObjectSummary& f) {
  ObjectInfo info;
  info.version = f.version;
  info.size = f.object_size;
  info.expire_at_ms = f.expire_at_ms;
  info.flash_state = memory::FlashState::kClean;
  return info;
}

std::optional<ObjectInfo> Store::flash_info(std::string_view key) {
  std::optional<flash::FlashObjectSummary> f = live_flash_object(*flash_, *reader_, key);
  if (!f) return std::nullopt;
  ObjectInfo info = brief_info(*f);
  // Live means complete: every chunk 0..n-1 is on flash.
  for (uint32_t i = 0; i < f->readable_chunks; ++i) {
    uint64_t start = uint64_t{i} * reader_->chunk_size();
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(
        reader_->chunk_size(), f->object_size - std::min(f->object_size, start)));
    info.chunks.push_back(memory::ChunkInfo{.index = i, .size = len});
  }
  return info;
}

ReadStart Store::read(std::string_view key, uint64_t offset, uint64_t length,
                      FlashReadCallbacks callbacks, const ReadOptions& options) {
  ReadStart out;
  const bool counted = options.count_access;
  std::optional<flash::FlashObjectSummary> info;
  std::optional<flash::FlashTier::VersionLocations> where;
  // A version found on flash can be superseded before its chunks are
  // located (an overwrite drops the old version from the index at once):
  // then the read starts again, and finds the new version.
  for (int attempt = 0;; ++attempt) {
    Result<ObjectView> mem = memory_->get(key, GetOptions{.offset = offset,
                                                          .length = length,
                                                          .touch = counted,
                                                          .end_lease = counted,
                                                          .use_once = options.use_once});
    if (mem) {
      if (counted) reads_.hit(key, mem->object_size());
      out.where = ReadStart::Where::kMemory;
      out.view = std::move(*mem);
      return out;
    }
    info = flash_ ? live_flash_object(*flash_, *reader_, key) : std::nullopt;
    // Memory may have missed a part just as an overwrite replaced it (and
    // dropped the flash copy): the new version is then in memory.
    if (!info && flash_ && attempt < 3 && memory_->stat(key)) continue;
    if (!info) {
      if (counted) reads_.miss(key);
      return out;
    }
    // A range within one chunk needs no region pins (see Pinning::kNone),
    // unless its read starts later.
    where = flash_->locate_version(
        key, info->version,
        within_one_chunk(offset, length, info->object_size, reader_->chunk_size()) && !options.hold
            ? flash::FlashTier::Pinning::kNone
            : flash::FlashTier::Pinning::kPin);
    if (where || attempt >= 3) break;
  }
  out.where = ReadStart::Where::kFlash;
  out.version = info->version;
  out.object_size = info->object_size;
  out.expire_at_ms = info->expire_at_ms;
  out.offset = std::min(offset, info->object_size);
  out.length = std::min(length, info->object_size - out.offset);
  if (options.hold) {
    if (counted) {
      reads_.hit(key, info->object_size);
      reads_.from_flash();
    }
    out.held = std::make_shared<HeldRead>(HeldRead{
        .key = std::string(key),
        .info = *info,
        .offset = out.offset,
        .length = out.length,
        .resident = resident_part(
            key, info->version, out.offset, out.length,
            GetOptions{.touch = counted, .end_lease = counted, .use_once = options.use_once}),
        .where = std::move(where)});
    return out;
  }
  // One read, two consumers: a promotion of this version in flight serves
  // this read too, with no second device read.
  if (promoter_ && out.length > 0) {
    out.flash_read = promoter_->attach(key, info->version, out.offset, out.length, callbacks);
    if (out.flash_read) {
      if (counted) reads_.hit(key, info->object_size);
      reads_attached_.add();
      return out;
    }
  }
  if (counted) {
    reads_.hit(key, info->object_size);
    reads_.from_flash();
  }
  std::optional<ObjectWriter> copy;
  FlashReader::OnCopied on_copied;
  // Use-once and look-ahead reads never count toward promotion.
  if (counted && !options.use_once)
    start_promotion_for_read(key, *info, out.offset == 0 && out.length == info->object_size, copy,
                             on_copied);
  out.flash_read = reader_->start(
      key, *info, out.offset, out.length, std::move(callbacks), options.window, std::move(copy),
      std::move(on_copied),
      resident_part(
          key, info->version, out.offset, out.length,
          GetOptions{.touch = counted, .end_lease = counted, .use_once = options.use_once}),
      std::move(where));
  return out;
}

std::shared_ptr<FlashRead> Store::start_held(HeldRead& held, FlashReadCallbacks callbacks) {
  if (held.started) {
    callbacks.on_done(Status::invalid_argument("a held read starts once"));
    return nullptr;
  }
  held.started = true;
  return reader_->start(held.key, held.info, held.offset, held.length, std::move(callbacks), {},
                        std::nullopt, {}, std::move(held.resident), std::move(held.where));
}

// Memory may hold some chunks of the version (a clean object held in part):
// the read takes those from there.
std::vector<memory::ChunkPin> Store::resident_part(std::string_view key, uint64_t version,
                                                   uint64_t offset, uint64_t length,
                                                   const GetOptions& options) {
  if (length == 0) return {};
  const uint64_t cs = reader_->chunk_size();
  return memory_->resident_chunks(key, version, static_cast<uint32_t>(offset / cs),
                                  static_cast<uint32_t>((offset + length - 1) / cs), options);
}

void Store::count_streamed_read(std::string_view key, bool use_once) {
  reads_.stream_tile();
  if (use_once || !promoter_ || !promoter_->admit(hash64(key))) return;
  promoter_->promote(key, PromotionRequest{}, PromotionDone{});
}

// Promotion-on-hit (admitted by the sketch) or, failing that, a demand kick
// (demand-kick, throttled). A whole read fills the memory copy as it goes;
// a partial one queues a promotion of its own. Neither makes the read wait.
void Store::start_promotion_for_read(std::string_view key, const flash::FlashObjectSummary& info,
                                     bool whole, std::optional<ObjectWriter>& copy,
                                     FlashReader::OnCopied& on_copied) {
  // What was written past memory for its size is read from flash: copying
  // it up would push out most of what memory holds.
  if (writes_past_memory(info.object_size)) return;
  const bool admitted = promoter_->admit(hash64(key));
  if (!admitted && !prefetcher_->kick_allowed()) return;
  PromotionRequest request = admitted ? PromotionRequest{} : prefetcher_->kick_request();
  PromotionDone done = admitted ? PromotionDone{} : prefetcher_->kick_done();
  if (!whole || info.object_size == 0) {
    promoter_->promote(key, std::move(request), std::move(done));
    return;
  }
  std::optional<Promoter::Copy> c = promoter_->begin_copy(key, info, std::move(request), done);
  if (!c) return;
  copy = std::move(c->writer);
  on_copied = std::move(c->on_copied);
}

Result<ObjectView> Store::read_resident(std::string_view key, const ResidentRead& how) {
  GetOptions get;
  get.offset = how.offset;
  get.length = how.length;
  get.touch = how.touch;
  get.end_lease = how.end_lease;
  Result<ObjectView> v = memory_->get(key, get);
  if (!how.counted) return v;
  if (v) {
    reads_.hit(key, v->object_size());
    return v;
  }
  if (v.status().code() != StatusCode::kNotFound) return v;
  if (flash_ && live_flash_object(*flash_, *reader_, key))
    return Status::busy("the value is on flash only; fetch it first");
  reads_.miss(key);
  return v;
}

bool Store::needs_flash(std::string_view key) {
  if (!flash_ || memory_->contains(key)) return false;
  return live_flash_object(*flash_, *reader_, key).has_value();
}

void Store::fetch(std::span<const std::string_view> keys, std::function<void(Status)> done) {
  std::vector<std::string_view> wanted;
  for (std::string_view k : keys)
    if (needs_flash(k)) wanted.push_back(k);
  if (wanted.empty()) return done(Status::ok());
  auto join = StatusJoin::make(wanted.size(), std::move(done));
  for (std::string_view k : wanted) {
    // A promotion of the key already in flight: wait for it to end rather
    // than be refused as its duplicate and poll.
    auto one_done = join->arrival();
    if (promoter_->when_settled(k, [one_done] { one_done(Status::ok()); })) continue;
    PromotionRequest request{.trigger = PromotionTrigger::kFetch,
                             .lease = true,
                             .clean_only = false,
                             .still_wanted = {},
                             .on_early_read = {}};
    // Busy (a promotion of the key in flight that cannot be waited for),
    // gone or already in memory are not errors: the caller re-checks
    // residency and fetches again if needed.
    promoter_->promote(k, std::move(request), [one_done](PromotionOutcome outcome, uint64_t) {
      one_done(fetch_status(outcome));
    });
  }
}

// The blocking read: waits for the flash pieces and gathers them into one
// buffer outside the memory budget (the caller holds it, not the cache).
Result<ObjectView> Store::get(std::string_view key, uint64_t offset, uint64_t length,
                              const ReadOptions& options) {
  Result<ObjectView> r = get_once(key, offset, length, options);
  // An object that moved between tiers mid-read is simply read again.
  for (int attempt = 0; attempt < 3 && !r && r.status().code() == StatusCode::kConflict; ++attempt)
    r = get_once(key, offset, length, options);
  return r;
}

Result<ObjectView> Store::get_once(std::string_view key, uint64_t offset, uint64_t length,
                                   const ReadOptions& options) {
  struct Wait {
    Mutex mu;
    CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    Status status ABSL_GUARDED_BY(mu);
    // Filled by the read's pieces, one at a time, before done: not locked.
    memory::Chunk* buffer = nullptr;
    uint64_t filled = 0;
  };
  auto wait = std::make_shared<Wait>();
  FlashReadCallbacks cb;
  cb.on_piece = [wait](ValuePiece p) {
    // No buffer, or too small: the object moved between probe and read.
    if (!wait->buffer || wait->filled + p.bytes.size() > wait->buffer->size) {
      wait->filled = UINT64_MAX;
      return;
    }
    std::memcpy(wait->buffer->data() + wait->filled, p.bytes.data(), p.bytes.size());
    wait->filled += p.bytes.size();
  };
  cb.on_done = [wait](Status st) {
    MutexLock lock(wait->mu);
    wait->status = std::move(st);
    wait->done = true;
    wait->cv.notify_all();
  };
  // The buffer must exist before a piece can arrive, but its size is known
  // only from the flash index; read() may deliver synchronously, so probe
  // the index first.
  std::optional<flash::FlashObjectSummary> probe;
  if (flash_ && !memory_->contains(key)) probe = flash_->summary(key);
  if (probe) {
    uint64_t off = std::min(offset, probe->object_size);
    uint64_t len = std::min(length, probe->object_size - off);
    if (len > memory::Chunk::kMaxSize)
      return Status::too_large("range too large for one blocking read");
    wait->buffer = memory::Chunk::allocate(static_cast<uint32_t>(len), static_cast<uint32_t>(len),
                                           scratch_slot_.id());
    scratch_bytes_.fetch_add(static_cast<int64_t>(len));
  }
  memory::ChunkPin pin;
  if (wait->buffer) {
    pin = memory::ChunkPin(wait->buffer);
    wait->buffer->release();  // the pin holds it now
  }
  ReadStart start = read(key, offset, length, std::move(cb), options);
  if (start.where == ReadStart::Where::kMemory) return std::move(start.view);
  if (start.where == ReadStart::Where::kAbsent) return Status::not_found();
  MutexLock lock(wait->mu);
  while (!wait->done) wait->cv.wait(wait->mu);
  if (!wait->status.is_ok()) return wait->status;
  if (!wait->buffer || wait->filled != start.length)
    return Status::conflict("object moved while being read");
  // (Sized, then assigned: GCC 12 at -O2 falsely warns that push_back on an
  // empty InlinedVector reads uninitialized heap fields.)
  absl::InlinedVector<memory::ChunkPin, 2> pins(1);
  pins[0] = std::move(pin);
  // One segment holding exactly the range: present it as chunk 0 of an
  // object that starts at the range.
  return ObjectView(start.version, start.object_size, start.expire_at_ms, 0, start.length,
                    std::move(pins), UINT32_MAX);
}

std::vector<bool> Store::exist(std::span<const std::string_view> keys,
                               const ExistOptions& options) {
  std::vector<bool> out;
  out.reserve(keys.size());
  const bool prefetch = prefetcher_ && (options.prefetch_to_memory || options.prefetch_mapped);
  bool stopped = false;  // a cooldown ended the batch's prefetching
  for (std::string_view k : keys) {
    const bool in_memory = memory_->contains(k);
    std::optional<flash::FlashObjectSummary> below;
    if (!in_memory && flash_) below = live_flash_object(*flash_, *reader_, k);
    out.push_back(in_memory || below.has_value());
    if (prefetch && !stopped) stopped = !prefetch_probed(k, in_memory, below, options);
  }
  if (stopped) prefetcher_->note_early_exit();
  return out;
}

void Store::prefetch(std::span<const std::string_view> keys, const ExistOptions& options) {
  if (!prefetcher_ || !(options.prefetch_to_memory || options.prefetch_mapped)) return;
  for (std::string_view k : keys) {
    const bool in_memory = memory_->contains(k);
    std::optional<flash::FlashObjectSummary> below;
    if (!in_memory && flash_) below = live_flash_object(*flash_, *reader_, k);
    if (!prefetch_probed(k, in_memory, below, options)) {
      prefetcher_->note_early_exit();
      return;
    }
  }
}

bool Store::prefetch_probed(std::string_view key, bool in_memory,
                            const std::optional<flash::FlashObjectSummary>& on_flash,
                            const ExistOptions& options) {
  if (options.prefetch_to_memory && !probe_for_prefetch(key, in_memory, on_flash)) return false;
  if (!has_prefetch_map_.load(std::memory_order_relaxed)) return true;
  for (const std::string& companion : prefetch_companions(key)) {
    if (options.companion_elsewhere && options.companion_elsewhere(companion)) continue;
    const bool c_in_memory = memory_->contains(companion);
    std::optional<flash::FlashObjectSummary> c_below;
    if (!c_in_memory) c_below = live_flash_object(*flash_, *reader_, companion);
    if (!probe_for_prefetch(companion, c_in_memory, c_below)) return false;
  }
  return true;
}

bool Store::probe_for_prefetch(std::string_view key, bool in_memory,
                               const std::optional<flash::FlashObjectSummary>& on_flash) {
  if (in_memory) {
    prefetcher_->note_in_memory();
    return true;
  }
  if (!on_flash) {
    prefetcher_->note_absent();
    return true;
  }
  return prefetcher_->request(key, on_flash->object_size);
}

std::vector<std::string> Store::prefetch_companions(std::string_view key) const {
  std::vector<std::string> out;
  MutexLock lock(prefetch_map_mu_);
  for (const SuffixRewrite& r : prefetch_map_) {
    if (key.size() < r.from.size() || !key.ends_with(r.from)) continue;
    out.push_back(std::string(key.substr(0, key.size() - r.from.size())) + r.to);
  }
  return out;
}

std::optional<ObjectInfo> Store::stat(std::string_view key) {
  std::optional<ObjectInfo> info = memory_->stat(key);
  if (info || !flash_) return info;
  return flash_info(key);
}

AbsentWatch Store::watch_absent(std::string_view key) {
  return memory_->watch_absent(key);
}

std::optional<ObjectInfo> Store::stat_brief(std::string_view key) {
  std::optional<ObjectInfo> info = memory_->stat(key);
  if (info || !flash_) return info;
  std::optional<flash::FlashObjectSummary> f = live_flash_object(*flash_, *reader_, key);
  if (!f) return std::nullopt;
  return brief_info(*f);
}

}  // namespace tierkv
