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
// With a flash tier (Config::flash_size > 0), memory is a cache over flash:
// objects evicted from memory are written to flash first (offload), and read
// back from there. A read that needs flash never blocks inside read(): its
// bytes arrive through callbacks, in order, pulled by the consumer through a
// bounded window (ReadWindow, flash-read-buffer). get() is the blocking form, for
// callers that may wait (tools, tests, embedded users) — never a network
// thread.
//
// All methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "core/status.h"
#include "memory/memory_tier.h"
#include "store/api_types.h"
#include "store/flashio/flash_copy.h"
#include "store/key_locks.h"
#include "store/preheat/preheat_jobs.h"
#include "store/preheat/preheat_types.h"
#include "store/read_accounting.h"

namespace tierkv {

namespace flash {
class FlashTier;
class IoEngine;
struct FlashObjectSummary;
struct RecoveryProgress;
}  // namespace flash
class BufferBudget;
class FlashOffloader;
class FlashReader;
struct HeldRead;
class Prefetcher;
class Preheater;
class FlashValueSink;
class StagedPut;
struct StagedPutOptions;
class Promoter;
class WorkerPool;
class Writeback;
class StreamReader;
class Readahead;
struct StreamOptions;
struct StreamContext;

using flash::FlashStats;
using flash::RecoveryStats;
using memory::GetOptions;
using memory::ObjectInfo;
using memory::ObjectView;
using memory::ObjectWriter;
using memory::ScanPage;
using memory::WriteCondition;
using memory::WriteOptions;
using memory::WriteResult;

struct ExistOptions {
  // Treat the probe as "will read soon": each key present only on flash,
  // and each companion key exists-prefetch-map names for a probed key, is
  // handed to the prefetch throttle, which may queue a promotion (see
  // prefetcher.h). The answer comes from the indexes alone: no I/O, no wait.
  bool prefetch_to_memory = false;
  // Prefetch only the companions exists-prefetch-map names (plain EXISTS
  // with a map but without exists-prefetch).
  bool prefetch_mapped = false;
  // If set, true for a companion that is someone else's to prefetch (in
  // cluster mode, another node's, which the server hints instead): it is
  // neither probed here nor counted.
  std::function<bool(std::string_view companion)> companion_elsewhere = {};
};

// A piece of a value read from flash. `owner` keeps `bytes` alive.
struct ValuePiece {
  std::string_view bytes;
  std::shared_ptr<const void> owner;
};

// How the flash part of a read reports. Both run on a flash I/O thread (or,
// for a chunk that is gone or a cancel, on the thread that asked for it) and
// may run before read() returns; never two at once for one read. on_piece
// gets the pieces in byte order; the read goes on as their owners are
// dropped (see FlashRead), so pieces must not outlive the Store. on_done
// runs once, last: OK after every piece, else the read stopped (NotFound:
// the object went away or failed its checksum; IOError; Unavailable:
// cancelled).
struct FlashReadCallbacks {
  std::function<void(ValuePiece)> on_piece;
  std::function<void(Status)> on_done;
};

// How far a flash read runs ahead of its consumer: at most `depth` chunks
// held (read, arriving, or handed out and not yet released) and at most
// `parallel` being read. 0 takes the store's defaults (flash-read-window,
// flash-read-inflight). GET streams with the defaults; look-ahead and range
// reads are the same reader with other numbers.
struct ReadWindow {
  uint32_t depth = 0;
  uint32_t parallel = 0;
};

// How one read() runs.
struct ReadOptions {
  ReadWindow window;
  // A use-once read (TIER.READ USEONCE, a use-once stream): it never counts
  // toward promotion-on-hit or fires a demand kick, and an object of the
  // memory tier's use-once lane that it reads is dropped once served if it
  // is clean and no one else pins it.
  bool use_once = false;
  // False for a look-ahead read: no hit or miss is counted and memory's
  // policy is not touched (the consumer's read counts later, if it comes).
  bool count_access = true;
  // A read whose answer is fixed now and whose device reads start later
  // (EXEC's replies, sent one after another): a flash answer comes as
  // ReadStart::held, with the version's regions pinned and nothing issued,
  // no promotion and no callback until Store::start_held().
  bool hold = false;

  static ReadOptions windowed(ReadWindow window) {
    ReadOptions o;
    o.window = window;
    return o;
  }
};

// How read_resident() reads memory's copy.
struct ResidentRead {
  uint64_t offset = 0;
  uint64_t length = UINT64_MAX;  // clipped to the object
  bool touch = true;             // an access for memory's eviction policy
  bool end_lease = true;         // the read consumes a prefetch lease
  // Counts a hit or a miss, and answers Busy for a value only flash has.
  bool counted = true;

  static ResidentRead whole(bool touch) { return range(0, UINT64_MAX, touch); }
  static ResidentRead range(uint64_t offset, uint64_t length, bool touch = true) {
    ResidentRead r;
    r.offset = offset;
    r.length = length;
    r.touch = touch;
    return r;
  }
  // Memory's copy, if it has one, for a caller that only looks (no access,
  // no lease ended, nothing counted).
  static ResidentRead look() {
    ResidentRead r;
    r.touch = false;
    r.end_lease = false;
    r.counted = false;
    return r;
  }
};

// A flash read in progress: the pull side of read(). The read advances as
// the consumer drops the pieces it was given (each piece's owner is a chunk
// buffer charged to flash-read-buffer), so a consumer that holds its pieces
// holds the read. Thread-safe; dropping the handle does not stop the read.
class FlashRead {
 public:
  virtual ~FlashRead() = default;
  // Reads nothing more; on_done still comes once (Unavailable), after the
  // reads in flight. Pieces already handed out stay valid.
  virtual void cancel() = 0;
  // Chunks held now: issued, arrived, or handed out and not yet released.
  virtual uint32_t chunks_held() const = 0;
  virtual uint64_t chunks_issued() const = 0;
};

// What read() found.
struct ReadStart {
  enum class Where : uint8_t { kAbsent, kMemory, kFlash };
  Where where = Where::kAbsent;
  ObjectView view;  // kMemory: the whole answer, pinned
  // kFlash: the range the pieces will make up (length may be 0: then
  // on_done(OK) comes with no piece).
  uint64_t version = 0;
  uint64_t object_size = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  int64_t expire_at_ms = 0;
  std::shared_ptr<FlashRead> flash_read;  // kFlash (null if length is 0)
  // kFlash with ReadOptions::hold: the read to start later. Dropping it
  // releases its pins.
  std::shared_ptr<HeldRead> held;
};

// Per-chunk residency, for TIER.STAT.
struct ChunkResidency {
  uint32_t index = 0;
  uint32_t size = 0;
  bool in_memory = false;
  bool on_flash = false;  // this version's chunk is indexed on flash
  uint32_t pins = 0;
  bool leased = false;
  bool use_once = false;
};

struct ObjectResidency {
  uint64_t version = 0;
  uint64_t size = 0;
  int64_t expire_at_ms = 0;
  bool in_memory = false;
  // dirty / flushing / clean / offloading for an object in memory; "flash"
  // for one only on flash.
  std::string_view state;
  std::vector<ChunkResidency> chunks;
};

struct FlashTierStatus {
  bool enabled = false;
  std::string error;  // why flash is off, if it was asked for
  std::string path;
  std::string io_backend;
  bool direct_io = false;
};

// Where opening stands. With a flash tier the index is recovered first
// (from the snapshot of a clean shutdown, or by scanning the device).
struct LoadProgress {
  bool loading = false;
  bool from_snapshot = false;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  int64_t start_ms = 0;  // unix ms; 0 before recovery began
};

enum class OpenMode : uint8_t {
  kWait,        // open() returns once the store is ready
  kBackground,  // open() returns at once; the flash index loads on a thread
};

struct StoreStats {
  memory::MemoryTierStats memory;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t flash_hits = 0;              // reads answered from flash
  int64_t flash_read_buffer_used = 0;   // bytes of flash read buffers held
  int64_t flash_read_buffer_limit = 0;  // flash-read-buffer (0 without flash)
  uint64_t flash_read_buffer_waits = 0;
  int64_t flash_write_buffer_used = 0;   // bytes of buffers of values written as they arrive
  int64_t flash_write_buffer_limit = 0;  // flash-write-buffer
  uint64_t flash_write_buffer_waits = 0;
  int64_t writeback_inflight_bytes = 0;  // background copies not yet landed
  uint64_t writeback_objects = 0;        // background copies landed
  uint64_t writeback_bytes = 0;
  uint64_t promotions_attempted = 0;
  uint64_t promotions_done = 0;
  uint64_t promotions_failed = 0;
  // The flash tier's, when has_flash(); zero otherwise.
  flash::FlashStats flash;
  flash::RecoveryStats recovery;
};

// For tests: what the store hands its parts beyond the Config.
struct StoreHooks {
  // Wraps the flash tier's I/O engine (FlashOptions::wrap_engine), e.g. to
  // hold or fail chosen reads.
  std::function<std::unique_ptr<flash::IoEngine>(std::unique_ptr<flash::IoEngine>)>
      wrap_flash_engine;
  // Runs on a promotion-pool worker before each job it takes, e.g. to hold
  // the workers so that promotions stay queued.
  std::function<void()> before_pool_job;
  // The same on a preheat-pool worker: holds preheat jobs.
  std::function<void()> before_preheat_job;
  // Runs on the thread that loads the store, before the flash index
  // loads, e.g. to hold a kBackground open in its loading state.
  std::function<void()> before_load;
};

class Store {
 public:
  // Opens a store configured by `config` (validated). Metrics go to
  // `metrics` if given, else to a registry the store owns. With
  // OpenMode::kBackground it returns while the flash index still loads:
  // until loading() is false, only loading(), load_progress(), stats(),
  // flash_status(), has_flash() (false) and metrics() may be called.
  // Where a file kept beside the flash tier of `config` goes: the flash
  // file's path plus `suffix`; empty without flash (nothing outlives the
  // process) or on a raw block device (no file system beside it).
  static std::string beside_flash(const Config& config, std::string_view suffix);
  static Result<std::unique_ptr<Store>> open(const Config& config,
                                             MetricsRegistry* metrics = nullptr,
                                             OpenMode mode = OpenMode::kWait,
                                             StoreHooks hooks = {});
  bool loading() const { return !loaded_.load(std::memory_order_acquire); }
  LoadProgress load_progress() const;
  // Blocks until loading is over (tests, tools).
  void wait_loaded() const;
  // The same, for at most `timeout`: whether loading is over.
  bool wait_loaded_for(std::chrono::milliseconds timeout) const;
  ~Store();

  // --- writes ---
  Result<WriteResult> put(std::string_view key, std::string_view value,
                          const WriteOptions& options = {});
  // Streaming write for large values: reserve, fill in place, then commit.
  // Nothing is visible until commit; an uncommitted writer frees its memory.
  // With `wait_for_room` false, OutOfMemory comes at once when memory has no
  // room now (all of it dirty, pinned or being offloaded), instead of after
  // waiting up to offload-wait-ms for offloads to land: for a caller that
  // sends the value to flash then (begin_flash_value).
  Result<ObjectWriter> begin_put(std::string_view key, uint64_t size, bool wait_for_room = true);
  Result<WriteResult> commit(ObjectWriter&& writer, const WriteOptions& options = {});
  std::vector<Result<WriteResult>> put_batch(
      std::span<const std::pair<std::string_view, std::string_view>> items,
      const WriteOptions& options = {});

  // --- reads ---
  // The non-blocking read: memory answers at once; flash pieces arrive via
  // `callbacks` (see FlashReadCallbacks). A flash hit counts toward
  // promotion; an admitted object is copied into memory as it is read.
  // The flash part is a window (ReadWindow) that the consumer pulls by
  // releasing pieces; ReadStart::flash_read can cancel it.
  // With ReadOptions::count_access false (CLIENT NO-TOUCH, look-ahead) the
  // read is no access: the eviction policy does not see it, and a flash hit
  // neither counts toward promotion nor promotes.
  ReadStart read(std::string_view key, uint64_t offset, uint64_t length,
                 FlashReadCallbacks callbacks, const ReadOptions& options = {});
  // Starts a read that read() held (ReadOptions::hold), as read() would
  // have started it then: the same version, whatever was written since.
  // Once only; null (and on_done(OK) already called) if its length is 0.
  std::shared_ptr<FlashRead> start_held(HeldRead& held, FlashReadCallbacks callbacks);
  // An ordered sequence of keys read with look-ahead (stream_reader.h).
  std::unique_ptr<StreamReader> open_stream(std::vector<std::string> keys,
                                            const StreamOptions& options);
  // One consumer's ranged reads, with sequential ones read ahead
  // (readahead.h).
  std::unique_ptr<Readahead> open_readahead();
  // The non-blocking read for commands that need a value in memory, which
  // never touches flash: bytes of memory's copy (a hit), NotFound if no
  // tier has the key (a miss), or Busy if only flash has it: fetch() it and
  // ask again. ResidentRead::look() asks memory alone (NotFound also when
  // only flash has it) and counts nothing.
  Result<ObjectView> read_resident(std::string_view key, const ResidentRead& how = {});
  // True if the key exists and some of it is only on flash.
  bool needs_flash(std::string_view key);
  // Loads the flash-only objects among `keys` into memory (whatever the
  // admission filter says) and leases them for lease-ttl-ms, so a command
  // that reads them whole can run next. `done` runs once, on an I/O thread
  // or before fetch() returns; OK even if some keys were absent.
  void fetch(std::span<const std::string_view> keys, std::function<void(Status)> done);
  // With fsync=always: `done` runs once the object of `version` is durable
  // on flash (at once if flash is off or it already is).
  void persist(std::string_view key, uint64_t version, std::function<void(Status)> done);
  bool durable_writes() const { return durable_writes_; }

  // The blocking read (it waits for flash; not for network threads): bytes
  // [offset, offset + length) clipped to the object; NotFound if absent.
  // `options` as for read() (count_access false: a copy that is no access).
  Result<ObjectView> get(std::string_view key, uint64_t offset = 0, uint64_t length = UINT64_MAX,
                         const ReadOptions& options = {});
  // One answer per key, in order. Never blocks on I/O, with or without prefetch.
  std::vector<bool> exist(std::span<const std::string_view> keys, const ExistOptions& options = {});
  bool exists(std::string_view key) { return exist(std::span(&key, 1))[0]; }
  // The prefetching half of exist(), for a caller that answered the probe
  // with a plain exist() first and starts the prefetches once the answer is
  // on its way (they never change it).
  void prefetch(std::span<const std::string_view> keys, const ExistOptions& options);
  // How a plain EXISTS probes: per exists-prefetch and exists-prefetch-map.
  ExistOptions plain_exists_options() const;

  // --- writes past memory, and preheat (store_preheat.cc) ---
  // A write that goes to flash chunk by chunk and appears whole at its
  // commit (see staged_put.h); Unavailable without a flash tier. For
  // workers, never network threads: its writes may block.
  Result<std::unique_ptr<StagedPut>> begin_staged_put(std::string_view key, uint64_t size,
                                                      const StagedPutOptions& options);
  // With flash, a value memory should not take whole (larger than
  // large-value-memory-fraction of the budget) is written past it.
  bool writes_past_memory(uint64_t size) const;
  // A value that arrives over time (a large SET), written to flash as it
  // comes and committed on the pool (flash_value_sink.h); for network
  // threads: nothing in it blocks. Unavailable without a flash tier.
  Result<std::unique_ptr<FlashValueSink>> begin_flash_value(std::string_view key, uint64_t size);
  // RENAME and COPY of a value only flash holds, flash to flash, on the pool
  // (flash_copy.h); `done` runs once, on a worker (or here if the pool is
  // full or there is no flash tier). For network threads: never blocks.
  void copy_on_flash(FlashCopyRequest request, ExclusiveRunner exclusive,
                     std::function<void(Result<FlashCopyOutcome>)> done);
  // Preheat jobs (TIER.PREHEAT): the one handle to them (preheat_jobs.h).
  PreheatJobs& preheats() { return *preheats_; }

  // --- removal and key space ---
  // Callback that runs once what a removal or expiry change wrote to flash
  // is durable per the fsync policy (at once if nothing needed writing).
  // With fsync=always, removals and expiry changes always write, so a
  // caller that waits for it knows they survive a crash.
  using DurableCallback = std::function<void(Status)>;
  // With if_version, removes only that version: a compare-and-delete for
  // read-modify-write commands (GETDEL, rollbacks).
  bool remove(std::string_view key, std::optional<uint64_t> if_version = std::nullopt,
              DurableCallback durable = {});
  size_t remove_batch(std::span<const std::string_view> keys, DurableCallback durable = {});
  // Unix ms; 0 clears. False if absent.
  bool set_expiry(std::string_view key, int64_t expire_at_ms, DurableCallback durable = {});
  // Size, version and expiry from whichever tier holds the key.
  std::optional<ObjectInfo> stat(std::string_view key);
  // As stat(), without the per-chunk list of a flash-only key (chunks is
  // empty): the per-value version check of a stream.
  std::optional<ObjectInfo> stat_brief(std::string_view key);
  // WATCH of an absent key: the handle tells whether the key was created
  // (and maybe removed again) since. Take it before stat(), so a creation
  // between the two is never missed (memory/absent_watches.h).
  AbsentWatch watch_absent(std::string_view key);
  std::optional<ObjectResidency> residency(std::string_view key);
  // True when a key walk (scan(), random_key()) may read keys from the
  // device: flash holds objects indexed without their key. Such walks
  // belong off a network thread (run_key_walk()).
  bool key_walks_read_flash() const;
  // Runs `walk` on a store worker (run = true), or at once on this thread
  // with run = false when the workers are all busy or there are none.
  void run_key_walk(std::function<void(bool run)> walk);
  ScanPage scan(uint64_t cursor, size_t count);
  std::optional<std::string> random_key();
  // Objects in either tier (an object in both counts once, except that a
  // stale flash copy of a key rewritten in memory may count twice until
  // its region is reclaimed).
  uint64_t size() const;
  void flush();
  // Writes every object that exists only in memory to flash and waits.
  // OK at once without flash.
  Status persist_all();
  // Clean shutdown: cancels preheat jobs and waits for them at most
  // shutdown-timeout-ms, then persist_all() in every case, then the flash
  // index snapshot, so the next start loads the index instead of scanning
  // the device.
  Status close_cleanly();

  // --- administration ---
  // CONFIG SET of a key whose apply hook is the store's (memory budget,
  // object limits, promotion, prefetch, offload wait, leases, active expiry,
  // writeback, preheat, flash read and write buffers, streams): takes effect
  // at once, reading only that hook's fields of `next`. InvalidArgument for
  // a hook that is not the store's; the memory budget may fail (below
  // pinned data) and then nothing changed.
  Status apply_config(ConfigApply hook, const Config& next);
  StoreStats stats() const;
  // The miss-ratio curves of the reads so far (store/sizing; empty when
  // mrc-sample-rate is 0).
  MissRatioCurves::Curves sizing_curves() const { return reads_.curves(); }
  MetricsRegistry& metrics() { return *metrics_; }
  // False when the store runs on memory alone, or is still loading.
  bool has_flash() const { return !loading() && flash_ != nullptr; }
  FlashTierStatus flash_status() const { return loading() ? FlashTierStatus{} : flash_status_; }
  // Device latency of every chunk read from flash.
  HistogramSnapshot flash_read_latency() const;

 private:
  friend class StoreTiers;
  // exists-prefetch, exists-prefetch-map, demand-kick*, prefetch-* (also at open).
  void apply_prefetch(const Config& config);
  // flash-read-window, flash-read-inflight, flash-read-buffer (0: unchanged).
  void apply_flash_read(const Config& config);
  friend class StreamReader;
  friend class Readahead;
  Store(const Config& config, MetricsRegistry* metrics);
  // A stream handed its consumer a value it had read ahead: the access
  // counts now, and (unless use-once) toward promotion-on-hit.
  void count_streamed_read(std::string_view key, bool use_once);
  std::vector<memory::ChunkPin> resident_part(std::string_view key, uint64_t version,
                                              uint64_t offset, uint64_t length,
                                              const GetOptions& options);
  Status check_key(std::string_view key) const;
  Status check_size(uint64_t size) const;
  // Opens the flash tier (recovering its index) and wires the tiers; then
  // the store is ready.
  void load(const Config& config);
  void open_flash(const Config& config);
  void open_preheater(const Config& config);
  Result<ObjectView> get_once(std::string_view key, uint64_t offset, uint64_t length,
                              const ReadOptions& options);
  void after_write(std::string_view key, uint64_t version);
  bool remove_both_tiers(std::string_view key, std::optional<uint64_t> if_version,
                         DurableCallback durable);
  // Durable writes the flash queue refused (Busy), retried as writes land.
  struct PendingPersist {
    std::string key;
    uint64_t version;
    std::function<void(Status)> done;
  };
  Status try_persist(PendingPersist& p);
  void retry_persists();
  // commit() with the key in a view that outlives the call (the writer's own
  // copy moves into the index).
  Result<WriteResult> commit_as(std::string_view key, ObjectWriter&& writer,
                                const WriteOptions& options);
  // commit_as() before the write is counted: publishes in memory (with
  // flash, judging conditions by both tiers).
  Result<WriteResult> publish(std::string_view key, ObjectWriter&& writer,
                              const WriteOptions& options);
  // Conditional writes must see keys that only flash holds.
  Result<WriteResult> put_with_flash(std::string_view key, std::string_view value,
                                     const WriteOptions& options);
  // A flash-only object's info, if it is there and not expired.
  std::optional<ObjectInfo> flash_info(std::string_view key);
  // Promotion-on-hit or a demand kick for a flash read; with a whole read,
  // `copy` and `on_copied` make the read fill the memory copy.
  void start_promotion_for_read(std::string_view key, const flash::FlashObjectSummary& info,
                                bool whole, std::optional<ObjectWriter>& copy,
                                std::function<void(ObjectWriter&&, Status)>& on_copied);
  // A probed key and its companions, per `options`; false: the batch
  // stops (cooldown).
  bool prefetch_probed(std::string_view key, bool in_memory,
                       const std::optional<flash::FlashObjectSummary>& on_flash,
                       const ExistOptions& options);
  // One key of a prefetching probe; false: the batch stops (cooldown).
  bool probe_for_prefetch(std::string_view key, bool in_memory,
                          const std::optional<flash::FlashObjectSummary>& on_flash);
  // The companion keys exists-prefetch-map names for a probed key.
  std::vector<std::string> prefetch_companions(std::string_view key) const;

  std::unique_ptr<MetricsRegistry> owned_metrics_;
  MetricsRegistry* metrics_;
  std::unique_ptr<memory::MemoryTier> memory_;
  std::unique_ptr<FlashOffloader> offloader_;
  std::unique_ptr<Promoter> promoter_;
  StoreHooks hooks_;
  std::unique_ptr<FlashReader> reader_;
  // flash-write-buffer: shared with every FlashValueSink, which may outlive
  // the store's other parts by the pool jobs that hold it.
  std::shared_ptr<BufferBudget> write_buffers_;
  std::unique_ptr<Prefetcher> prefetcher_;
  // Runs on a pool of its own; destroyed before flash_ (its tasks hold
  // staged flash writes), see ~Store.
  std::unique_ptr<Preheater> preheater_;
  // Made with the store (before a background load opens flash), so that
  // commands and INFO can hold it at any time; attached to preheater_.
  std::unique_ptr<PreheatJobs> preheats_;
  // What streams share (metrics, defaults, the read-latency estimate); it
  // outlives flash_, whose last completions may still reach a stream.
  std::unique_ptr<StreamContext> streams_;
  uint64_t stream_collector_ = 0;
  // Runs promotions; stopped first at close, destroyed after flash_ (whose
  // last completions hand it continuations, which it then cancels).
  std::unique_ptr<WorkerPool> pool_;
  // Its thread stops before flash_ goes; it outlives flash_ for the
  // callbacks of copies still landing.
  std::unique_ptr<Writeback> writeback_;
  // Declared last, so destroyed first: its destructor waits for in-flight
  // I/O, whose callbacks use everything above.
  std::unique_ptr<flash::FlashTier> flash_;
  KeyLocks key_locks_;
  Mutex persist_mu_;
  std::vector<PendingPersist> persist_retry_ ABSL_GUARDED_BY(persist_mu_);
  std::atomic<bool> persist_retry_waiting_{false};
  std::atomic<int64_t> scratch_bytes_{0};  // buffers of blocking flash reads
  memory::BudgetSlot scratch_slot_{&scratch_bytes_};
  FlashTierStatus flash_status_;
  std::unique_ptr<flash::RecoveryProgress> progress_;
  std::atomic<bool> loaded_{false};
  mutable Mutex loaded_mu_;  // pairs with loaded_cv_ (loaded_ is atomic)
  mutable CondVar loaded_cv_;
  std::thread loader_;
  std::atomic<bool> exists_prefetch_{false};
  mutable Mutex prefetch_map_mu_;
  std::vector<SuffixRewrite> prefetch_map_ ABSL_GUARDED_BY(prefetch_map_mu_);
  std::atomic<bool> has_prefetch_map_{false};
  bool durable_writes_ = false;
  int64_t shutdown_timeout_ms_ = 10000;
  bool write_through_ = false;
  double large_value_fraction_ = 0.5;  // large-value-memory-fraction
  // Chunk buffers a large SET's value may hold waiting for flash.
  static constexpr size_t kFlashValueWindow = 4;
  std::atomic<int64_t> max_key_size_;
  std::atomic<int64_t> max_object_size_;
  ReadAccounting reads_;     // every counted read, write and removal
  Counter& reads_attached_;  // reads served by a promotion in flight (no read of their own)
};

}  // namespace tierkv
