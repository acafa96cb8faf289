// FlashValueSink: a value larger than memory, written to flash as it
// arrives (a large SET's bulk, read from the socket in place).
//
// The connection fills chunk-sized buffers (ValueSink); each full buffer is
// handed to the store's pool, where StagedPut::write copies it into flash's
// write queue (waiting there while the queue is full), so a network thread
// never blocks on flash. At most `window` buffers are outstanding: past
// that, paused() tells the caller to stop reading its socket until
// when_room() calls back, so a fast client is held to the device's pace and
// the buffers a connection holds stay bounded (window x chunk size).
// Every buffer a sink makes is also charged to the store's process-wide
// BufferBudget (flash-write-buffer) until the value is committed or the
// sink and its jobs are gone: a sink that needs a new buffer and finds no
// room is paused the same way until room is granted (or one of its own
// buffers comes back), so many connections sending large values at once
// stay within that cap, as long as the caller asks paused() before every
// batch of bytes it hands over (the server does). Bytes handed over without
// asking go into buffers taken past the cap. A sink that holds one buffer
// can always go on (it reuses it), so the cap never deadlocks: the others
// wait their turn, in order.
//
// finish() commits on the pool once every buffer is written: the object
// appears whole (StagedPut's commit), or not at all. A sink dropped without
// finish() leaves nothing visible; its staged chunks are reclaimed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "memory/memory_tier.h"
#include "memory/value_sink.h"
#include "store/flashio/staged_put.h"

namespace tierkv {

class BufferBudget;
class WorkerPool;
class Store;

class FlashValueSink final : public memory::ValueSink {
 public:
  // How the value becomes the key's, decided after it arrived (a SET's
  // options follow its value).
  struct Commit {
    // kAlways, kIfAbsent (NX) or kIfPresent (XX), judged on both tiers just
    // before the object's last chunk is written.
    memory::WriteCondition condition = memory::WriteCondition::kAlways;
    int64_t expire_at_ms = 0;  // unix ms; 0: none
    bool keep_ttl = false;     // the replaced object's expiry
  };
  // Runs once, on a pool thread (or at once if the pool has stopped).
  using CommitDone = std::function<void(Result<memory::WriteResult>)>;

  FlashValueSink(std::unique_ptr<StagedPut> put, Store& store, WorkerPool& pool,
                 std::shared_ptr<BufferBudget> budget, size_t window);
  ~FlashValueSink() override;
  FlashValueSink(const FlashValueSink&) = delete;
  FlashValueSink& operator=(const FlashValueSink&) = delete;

  std::pair<char*, size_t> next_writable() override;
  void advance(size_t n) override;
  uint64_t size() const override { return size_; }
  uint64_t filled() const override { return filled_; }

  // Bytes received and not yet in flash's write queue.
  uint64_t buffered_bytes() const;
  // True while `window` buffers wait for flash, or a new buffer waits for
  // room under flash-write-buffer: read no more for now.
  bool paused() const;
  // `fn` runs once when the sink may take bytes again, or at once here if
  // it already may: on a pool thread (a buffer was written), or on the
  // thread that released room under flash-write-buffer (another
  // connection's, or CONFIG SET's). Post back to your own thread.
  void when_room(std::function<void()> fn);
  // Once every byte arrived: commits as `commit` says. Written false (and
  // nothing visible) if the condition fails. The condition is judged, and
  // the last chunk written, inside `exclusive` (the server's gate), so the
  // value lands between two commands, never in the middle of an EXEC or
  // MSET.
  void finish(const Commit& commit, CommitDone done, ExclusiveRunner exclusive = {});

 private:
  struct Shared;
  void submit_current();

  const uint64_t size_;
  const uint32_t chunk_size_;
  uint64_t filled_ = 0;
  char* current_ = nullptr;  // the buffer being filled; starts at current_offset_
  uint64_t current_offset_ = 0;
  std::shared_ptr<Shared> shared_;
};

}  // namespace tierkv
