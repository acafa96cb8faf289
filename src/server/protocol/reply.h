// ReplyBuffer: the bytes queued for one client, in RESP2 or RESP3.
//
// Small replies are encoded into an owned byte buffer. Large bulk values are
// queued as pinned ObjectView segments and written with scatter-gather I/O
// straight from the chunk buffers: a 64 MiB GET never builds a 64 MiB copy.
// The connection drains it with gather() / consume().
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "store/api_types.h"

namespace tierkv::server {

enum class Proto : uint8_t { kResp2 = 2, kResp3 = 3 };

class ReplyBuffer {
 public:
  // Values of at least this many bytes are sent from their chunks, not copied.
  static constexpr size_t kZeroCopyThreshold = 16 * 1024;

  explicit ReplyBuffer(Proto proto = Proto::kResp2) : proto_(proto) {}
  void set_proto(Proto p) { proto_ = p; }
  Proto proto() const { return proto_; }

  void simple(std::string_view s);  // +s
  void ok() { simple("OK"); }
  void error(std::string_view message);  // -message (message carries its prefix: "ERR ...")
  void error(const Status& status);      // -PREFIX message, prefix from error_prefix()
  void integer(int64_t v);               // :v
  void bulk(std::string_view s);         // $len s (copied)
  void bulk(const ObjectView& view);     // $len + segments (zero-copy when large)
  void null();                           // RESP2 $-1, RESP3 _
  void null_array();                     // RESP2 *-1, RESP3 _
  void array(size_t n);                  // *n header; n elements follow
  void map(size_t pairs);                // RESP3 %n; RESP2 *2n
  void set(size_t n);                    // RESP3 ~n; RESP2 *n
  void dbl(double v);                    // RESP3 ,v; RESP2 bulk string (Redis formatting)
  void boolean(bool v);                  // RESP3 #t/#f; RESP2 :1/:0
  void verbatim(std::string_view s);     // RESP3 =len txt:s; RESP2 bulk
  void raw(std::string_view bytes);      // pre-encoded bytes
  // A bulk reply in parts, for values that arrive over time (flash reads):
  // the header, then the bytes (large pieces are sent from where they are,
  // kept alive by `owner`), then bulk_end().
  void bulk_header(uint64_t length);  // $length (RESP2 and RESP3 alike)
  void bulk_piece(std::string_view bytes, std::shared_ptr<const void> owner);
  void bulk_end() { raw("\r\n"); }
  // Moves everything queued in `other` to the end of this buffer.
  void splice(ReplyBuffer& other);

  // Error replies added so far (per-command failed-call accounting).
  uint64_t error_count() const { return errors_; }

  // Bytes queued and not yet consumed (the output-buffer-limit measure).
  size_t pending_bytes() const { return pending_; }
  bool empty() const { return pending_ == 0; }
  // Appends up to `max_segments` views of pending bytes, in order.
  void gather(std::vector<std::string_view>& out, size_t max_segments) const;
  // Drops `n` bytes from the front after they were written.
  void consume(size_t n);
  void clear();

  // Exchanges contents without allocating (std::swap would move-construct
  // the deque, which allocates).
  void swap(ReplyBuffer& other) noexcept {
    std::swap(proto_, other.proto_);
    segments_.swap(other.segments_);
    std::swap(pending_, other.pending_);
    std::swap(errors_, other.errors_);
  }

 private:
  enum class Kind : uint8_t { kOwned, kView, kExternal };
  struct Segment {
    std::string owned;                  // kOwned
    ObjectView view;                    // kView: pinned value bytes
    size_t view_segment = 0;            // kView: which segment of the view
    std::string_view external;          // kExternal: bytes kept alive by `owner`
    std::shared_ptr<const void> owner;  // kExternal
    size_t offset = 0;                  // bytes already consumed from this segment
    Kind kind = Kind::kOwned;
    std::string_view bytes() const;
  };
  std::string& tail_buffer();

  Proto proto_;
  std::deque<Segment> segments_;
  size_t pending_ = 0;
  uint64_t errors_ = 0;
};

}  // namespace tierkv::server
