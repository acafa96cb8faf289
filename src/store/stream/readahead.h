// Readahead: sequential ranged reads of one flash object, detected and read
// ahead, as Linux readahead does for a file. One per consumer (a
// connection: its TIER.READ and GETRANGE go through it).
//
//   auto ra = store->open_readahead();
//   ra->read("big", 0, n, cb, opts);      // plain
//   ra->read("big", n, n, cb, opts);      // sequential: look-ahead starts
//   ra->read("big", 2 * n, n, cb, opts);  // served from the look-ahead
//
// A read whose offset is where the previous read of the same key ended is
// sequential; the second sequential read of an object that only flash
// holds starts a look-ahead of the chunks past it. The look-ahead keeps up
// to `window` chunks ahead of the consumer, at most stream-channels chunk
// reads in flight, never past the end of the object. The window starts
// from the request size (as Linux's initial window: the request rounded up
// to a power of two, times 4, 2 or 1) and doubles each time a read is
// served from the look-ahead, up to readahead-max-chunks. Look-ahead chunks
// are StreamEntries (stream_entry.h), the same as a stream's values:
// charged to the memory tier's use-once lane, never installed in memory,
// no access counted until served.
//
// A read is served from the look-ahead only if the key still has the
// version the look-ahead was started for, and then from chunks of that
// version only: one version whole, or (a chunk read that finds another
// version) an error, never mixed bytes. Any other read (another key, an
// offset that is not where the last one ended), a changed version, reset()
// or destroying the Readahead ends the look-ahead: reads in flight are
// cancelled and chunks read ahead unread are dropped (counted wasted).
//
// Thread-safe; one consumer is expected. Must not outlive the Store.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "store/store.h"

namespace tierkv {

// What one Readahead did (the store-wide sums are in the registry).
struct ReadaheadCounts {
  uint64_t sequences = 0;  // look-aheads started
  uint64_t issued = 0;     // chunk reads started
  uint64_t hits = 0;       // reads served from chunks that had arrived
  uint64_t late = 0;       // reads served from the look-ahead that waited for it
  uint64_t wasted = 0;     // chunks read ahead and dropped unread
};

class Readahead {
 public:
  ~Readahead();
  Readahead(const Readahead&) = delete;
  Readahead& operator=(const Readahead&) = delete;

  // As Store::read(). `options.window` applies to plain reads only.
  ReadStart read(std::string_view key, uint64_t offset, uint64_t length,
                 FlashReadCallbacks callbacks, const ReadOptions& options);
  // Ends the look-ahead and forgets the sequence.
  void reset();
  bool active() const;      // a look-ahead runs
  uint32_t window() const;  // chunks it keeps ahead now
  uint32_t staged() const;  // chunks read ahead or being read now
  ReadaheadCounts counts() const;

 private:
  friend class Store;
  class Impl;
  explicit Readahead(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace tierkv
