// StreamReader: an ordered sequence of keys read with look-ahead.
//
//   auto stream = store->open_stream({"tile0", "tile1", ...},
//                                    StreamOptions{.depth = 4, .channels = 2, .use_once = true});
//   while (auto v = stream->next()) v->for_each_segment(compute);
//
// The stream keeps up to `depth` keys past its consumer read ahead, with at
// most `channels` of them being read at once: while the consumer works on
// one value, the next ones arrive, so the device latency L overlaps the
// consumer's compute C (depth >= ceil(L / C) hides it). Look-ahead reads are
// the store's pulled flash reads (FlashReader): what they hold is charged to
// flash-read-buffer and to the memory tier's use-once lane (at most
// stream-useonce-max-fraction of the budget, made room for only by dropping
// use-once data), never installed in memory, and dropped as soon as it is
// served. A key that memory holds is simply read from memory when its turn
// comes.
//
// Reading a key out of order, reset(), or destroying the reader ends the
// look-ahead: reads in flight are cancelled and what was read ahead unread
// is dropped (counted as wasted). A value is served only if it is still the
// key's current version: a key deleted or rewritten after it was read ahead
// is read again (one version, whole, or absent).
//
// Thread-safe; one consumer is expected. Must not outlive the Store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/store.h"

namespace tierkv {

struct StreamOptions {
  // Keys kept read ahead of the consumer: 0 is none; -1 takes stream-depth,
  // whose 0 means "from the measured flash read latency L and the
  // consumer's pace C": ceil(L / C) + 1, recomputed as the consumer reads.
  int32_t depth = -1;
  uint32_t channels = 0;  // reads in flight at once; 0: stream-channels
  bool use_once = false;  // see ReadOptions::use_once
};

// One value of a stream, whole: memory chunks or flash read buffers, held
// (and charged) until the value is dropped.
class StreamValue {
 public:
  const std::string& key() const { return key_; }
  uint64_t version() const { return version_; }
  uint64_t size() const { return size_; }
  template <typename Fn>  // fn(std::string_view)
  void for_each_segment(Fn&& fn) const {
    if (view_) return view_->for_each_segment(fn);
    for (const ValuePiece& p : pieces_) fn(p.bytes);
  }
  void append_to(std::string& out) const {
    for_each_segment([&](std::string_view s) { out.append(s); });
  }

 private:
  friend class StreamReader;
  std::string key_;
  uint64_t version_ = 0;
  uint64_t size_ = 0;
  std::optional<ObjectView> view_;
  std::vector<ValuePiece> pieces_;
};

// What one stream did (the store-wide sums are in the registry).
struct StreamCounts {
  uint64_t issued = 0;  // look-ahead reads started
  uint64_t hits = 0;    // values that had arrived when the consumer came
  uint64_t late = 0;    // values the consumer waited for
  uint64_t wasted = 0;  // values read ahead and dropped unread
};

class StreamReader {
 public:
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // The blocking form (embedded users, benchmarks): the next key's value.
  // OutOfRange after the last key; NotFound for a key that is absent (the
  // stream goes on with the key after it).
  Result<StreamValue> next();
  // The non-blocking form, as Store::read(): if `key` is the stream's next
  // key, it is served from the look-ahead and the stream moves on; any other
  // key ends the look-ahead (an out-of-order read) and is read plainly.
  // `use_once` asks for a use-once read even if the stream is not one.
  ReadStart read(std::string_view key, uint64_t offset, uint64_t length,
                 FlashReadCallbacks callbacks, bool use_once = false);
  // Ends the look-ahead (see above). Reads go on plainly: next() still
  // walks the keys in order.
  void reset();
  // False once the stream was reset or every key was read.
  bool active() const;
  size_t position() const;  // keys handed to the consumer so far
  uint32_t depth() const;   // the depth in use now
  StreamCounts counts() const;

 private:
  friend class Store;
  class Impl;
  explicit StreamReader(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace tierkv
