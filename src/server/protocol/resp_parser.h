// RespParser: an incremental parser of Redis requests (RESP multibulk and
// inline commands) that owns the connection's input buffer.
//
//   auto span = parser.prepare(16 * 1024);   // read socket bytes into it
//   parser.commit(n);
//   while ((ev = parser.next()) == Event::kCommand) run(parser.argv());
//
// Bytes may arrive in any pieces; commands come out one at a time, so a
// pipeline of a thousand commands in one read costs no extra copies. The
// argv views point into the buffer and stay valid until the next call to
// prepare() or next().
//
// Large values: when a bulk of at least kLargeValue bytes starts, next()
// returns kLargeValue and waits for the caller's choice: stream_into(writer)
// (the bytes go into the writer's buffers, and the caller may read the socket
// straight into direct_span()), discard() (skip the bytes: the caller already
// knows the answer is an error), or buffer() (keep it as a normal argument).
//
// Errors follow Redis's texts and semantics: after kError the connection
// answers error() and closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/api_types.h"

namespace tierkv::server {

class RespParser {
 public:
  static constexpr size_t kLargeValue = 64 * 1024;
  static constexpr size_t kDefaultCapacity = 16 * 1024;

  enum class Event { kNeedMore, kCommand, kLargeValue, kError };

  struct Limits {
    int64_t max_bulk_len = int64_t{512} << 20;
    int64_t max_multibulk_args = 1 << 20;
    int64_t max_inline_len = 64 * 1024;
    // Before AUTH Redis accepts only small requests (10 args, 16 KiB bulks).
    bool unauthenticated = false;
  };

  RespParser();
  void set_limits(const Limits& limits) { limits_ = limits; }

  // Writable space at the end of the buffer, at least `min_free` bytes (more
  // if the current argument needs more). May move buffered bytes.
  std::span<char> prepare(size_t min_free = kDefaultCapacity);
  void commit(size_t n) { wpos_ += n; }

  Event next();

  // kCommand: the arguments. kLargeValue: the arguments before the value.
  const std::vector<std::string_view>& argv() const { return argv_; }
  // kLargeValue: which argument, and how many bytes it has.
  size_t large_index() const { return args_.size(); }
  uint64_t large_length() const { return value_remaining_; }
  void stream_into(ValueSink* sink);
  void discard();
  void buffer();
  // Whether a streamed value was discarded in the current command.
  bool value_discarded() const { return value_mode_ == ValueMode::kDiscard; }

  // While a value streams into a writer and no buffered bytes remain, the
  // socket may read straight into the writer.
  bool wants_direct() const;
  std::span<char> direct_span();
  void direct_commit(size_t n);

  // kError: the reply text ("ERR Protocol error: ...").
  const std::string& error() const { return error_; }

  size_t buffered() const { return wpos_ - rpos_; }
  // Bytes of the command being received that the buffer holds (a value
  // streamed into a writer or discarded is not in it).
  size_t query_bytes() const { return wpos_ - cmd_start_ - (dead_end_ - dead_begin_); }
  size_t capacity() const { return cap_; }

 private:
  enum class State { kStart, kArgHeader, kArgData, kLargeDecision, kValue, kValueEnd, kDone };
  enum class ValueMode { kNone, kStream, kDiscard };
  struct Arg {
    size_t offset, length;
  };

  Event fail(std::string_view message);
  Event parse_inline();
  Event finish_command();
  // Scans for '\r' from rpos_: its offset, or npos if no full line is there.
  size_t find_line_end() const;
  void consume_value_bytes();
  void compact(size_t min_free);

  Limits limits_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t rpos_ = 0;       // next byte to parse
  size_t wpos_ = 0;       // end of buffered bytes
  size_t cmd_start_ = 0;  // first byte of the command being parsed
  // Bytes of a streamed or discarded value that were in the buffer: not
  // needed any more, dropped when the buffer is compacted.
  size_t dead_begin_ = 0, dead_end_ = 0;

  State state_ = State::kStart;
  int64_t args_expected_ = 0;
  int64_t bulk_len_ = 0;
  std::vector<Arg> args_;
  std::vector<std::string_view> argv_;
  std::vector<std::string> inline_args_;

  ValueMode value_mode_ = ValueMode::kNone;
  ValueSink* writer_ = nullptr;
  uint64_t value_remaining_ = 0;
  size_t value_index_ = 0;
  std::string error_;
};

// Redis's sdssplitargs: splits an inline command line into arguments with
// its quoting rules. False on unbalanced quotes.
bool split_inline_args(std::string_view line, std::vector<std::string>& out);

}  // namespace tierkv::server
