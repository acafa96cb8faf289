#include "server/protocol/resp_parser.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>

#include "server/protocol/number_text.h"

namespace tierkv::server {
namespace {

constexpr size_t kNpos = static_cast<size_t>(-1);
// Redis's PROTO_INLINE_MAX_SIZE: the longest count line ("*N", "$N").
constexpr size_t kMaxCountLine = 64 * 1024;
// An idle buffer larger than this is given back.
constexpr size_t kMaxIdleCapacity = 256 * 1024;
// Growth step and rounding for large buffers.
constexpr size_t kStep = 1 << 20;

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A "*N" or "$N" count: the common case (no sign, no leading zero, fits)
// inline; anything else through parse_int64 for Redis's exact rules.
std::optional<int64_t> parse_count(const char* p, size_t n) {
  if (n == 0 || n > 18 || p[0] < '1' || p[0] > '9') return parse_int64(std::string_view(p, n));
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] < '0' || p[i] > '9') return std::nullopt;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

}  // namespace

bool split_inline_args(std::string_view line, std::vector<std::string>& out) {
  out.clear();
  // Redis works on a C string: a NUL ends the line.
  if (size_t nul = line.find('\0'); nul != std::string_view::npos) line = line.substr(0, nul);
  size_t p = 0;
  auto at = [&](size_t i) { return i < line.size() ? line[i] : '\0'; };
  for (;;) {
    while (p < line.size() && is_space(line[p])) ++p;
    if (p >= line.size()) return true;
    bool in_double = false, in_single = false, done = false;
    std::string current;
    while (!done) {
      char c = at(p);
      if (in_double) {
        if (c == '\\' && at(p + 1) == 'x' && hex_value(at(p + 2)) >= 0 &&
            hex_value(at(p + 3)) >= 0) {
          current.push_back(static_cast<char>(hex_value(at(p + 2)) * 16 + hex_value(at(p + 3))));
          p += 3;
        } else if (c == '\\' && at(p + 1) != '\0') {
          ++p;
          switch (at(p)) {
            case 'n':
              current.push_back('\n');
              break;
            case 'r':
              current.push_back('\r');
              break;
            case 't':
              current.push_back('\t');
              break;
            case 'b':
              current.push_back('\b');
              break;
            case 'a':
              current.push_back('\a');
              break;
            default:
              current.push_back(at(p));
              break;
          }
        } else if (c == '"') {
          // A closing quote must be followed by a space or the end.
          if (at(p + 1) != '\0' && !is_space(at(p + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;
        } else {
          current.push_back(c);
        }
      } else if (in_single) {
        if (c == '\\' && at(p + 1) == '\'') {
          ++p;
          current.push_back('\'');
        } else if (c == '\'') {
          if (at(p + 1) != '\0' && !is_space(at(p + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;
        } else {
          current.push_back(c);
        }
      } else {
        switch (c) {
          case ' ':
          case '\n':
          case '\r':
          case '\t':
          case '\0':
            done = true;
            break;
          case '"':
            in_double = true;
            break;
          case '\'':
            in_single = true;
            break;
          default:
            current.push_back(c);
            break;
        }
      }
      if (at(p) != '\0') ++p;
    }
    out.push_back(std::move(current));
  }
}

RespParser::RespParser() : buf_(new char[kDefaultCapacity]), cap_(kDefaultCapacity) {}

std::span<char> RespParser::prepare(size_t min_free) {
  // An argument being buffered arrives in one piece if the buffer fits it.
  // The room grows with the bytes that actually arrived (at most doubling),
  // so a header announcing a huge bulk does not allocate it up front.
  if (state_ == State::kArgData) {
    size_t have = wpos_ - rpos_;
    size_t need = static_cast<size_t>(bulk_len_) + 2;
    if (need > have) min_free = std::max(min_free, std::min(need - have, std::max(cap_, kStep)));
  }
  if (cap_ - wpos_ < min_free || (cmd_start_ == wpos_ && cmd_start_ > 0)) compact(min_free);
  return {buf_.get() + wpos_, cap_ - wpos_};
}

// Moves the bytes still needed (the current command's parsed arguments and
// the unparsed input, minus any dead value bytes) to the front, growing or
// shrinking the buffer as needed.
void RespParser::compact(size_t min_free) {
  bool has_dead = value_mode_ != ValueMode::kNone;
  size_t head = (has_dead ? dead_begin_ : rpos_) - cmd_start_;
  size_t tail_start = has_dead ? dead_end_ : rpos_;
  size_t tail = wpos_ - tail_start;  // includes unparsed bytes
  size_t live = head + tail;
  size_t want = std::max(kDefaultCapacity, live + min_free);
  size_t new_cap = cap_;
  if (want > cap_) want = std::max(want, cap_ + cap_ / 2);  // geometric growth
  if (want > cap_ || (live == 0 && cap_ > kMaxIdleCapacity)) {
    // Powers of two while small; large buffers are sized to what is needed.
    new_cap = want <= kStep ? std::bit_ceil(want) : (want + kStep - 1) / kStep * kStep;
  }
  char* dst = buf_.get();
  std::unique_ptr<char[]> fresh;
  if (new_cap != cap_) {
    fresh.reset(new char[new_cap]);
    dst = fresh.get();
  }
  if (head > 0) std::memmove(dst, buf_.get() + cmd_start_, head);
  if (tail > 0) std::memmove(dst + head, buf_.get() + tail_start, tail);
  for (Arg& a : args_) {
    if (a.length > 0) a.offset -= cmd_start_;
  }
  size_t parsed_tail = rpos_ > tail_start ? rpos_ - tail_start : 0;
  rpos_ = head + parsed_tail;
  wpos_ = head + tail;
  // Arguments parsed after the dead bytes moved down by the dead length too.
  if (has_dead) {
    size_t dead = dead_end_ - dead_begin_;
    for (Arg& a : args_) {
      if (a.length > 0 && a.offset >= head) a.offset -= dead;
    }
    dead_begin_ = dead_end_ = head;
  }
  cmd_start_ = 0;
  if (fresh) {
    buf_ = std::move(fresh);
    cap_ = new_cap;
  }
}

size_t RespParser::find_line_end() const {
  const char* start = buf_.get() + rpos_;
  const void* cr = std::memchr(start, '\r', wpos_ - rpos_);
  if (cr == nullptr) return kNpos;
  size_t at = static_cast<size_t>(static_cast<const char*>(cr) - buf_.get());
  if (at + 1 >= wpos_) return kNpos;  // the '\n' has not arrived
  return at;
}

RespParser::Event RespParser::fail(std::string_view message) {
  error_ = "ERR Protocol error: ";
  error_.append(message);
  return Event::kError;
}

RespParser::Event RespParser::next() {
  if (state_ == State::kDone) {
    args_.clear();
    argv_.clear();
    value_mode_ = ValueMode::kNone;
    writer_ = nullptr;
    dead_begin_ = dead_end_ = 0;
    state_ = State::kStart;
  }
  for (;;) {
    switch (state_) {
      case State::kStart: {
        cmd_start_ = rpos_;
        if (rpos_ == wpos_) return Event::kNeedMore;
        if (buf_[rpos_] != '*') {
          size_t before = rpos_;
          Event e = parse_inline();
          // An empty line is consumed and runs nothing: go on parsing.
          if (e == Event::kNeedMore && rpos_ != before) continue;
          return e;
        }
        size_t cr = find_line_end();
        if (cr == kNpos) {
          if (wpos_ - rpos_ > kMaxCountLine) return fail("too big mbulk count string");
          return Event::kNeedMore;
        }
        std::optional<int64_t> n = parse_count(buf_.get() + rpos_ + 1, cr - rpos_ - 1);
        if (!n || *n > INT32_MAX || *n > limits_.max_multibulk_args)
          return fail("invalid multibulk length");
        if (*n > 10 && limits_.unauthenticated) return fail("unauthenticated multibulk length");
        rpos_ = cr + 2;
        if (*n <= 0) continue;  // an empty command: Redis skips it
        args_expected_ = *n;
        args_.reserve(static_cast<size_t>(std::min<int64_t>(*n, 1024)));
        state_ = State::kArgHeader;
        break;
      }
      case State::kArgHeader: {
        size_t cr = find_line_end();
        if (cr == kNpos) {
          if (wpos_ - rpos_ > kMaxCountLine) return fail("too big bulk count string");
          return Event::kNeedMore;
        }
        if (buf_[rpos_] != '$') {
          return fail(std::string("expected '$', got '") + buf_[rpos_] + "'");
        }
        std::optional<int64_t> n = parse_count(buf_.get() + rpos_ + 1, cr - rpos_ - 1);
        if (!n || *n < 0 || *n > limits_.max_bulk_len) return fail("invalid bulk length");
        if (*n > 16384 && limits_.unauthenticated) return fail("unauthenticated bulk length");
        rpos_ = cr + 2;
        bulk_len_ = *n;
        if (static_cast<size_t>(*n) >= kLargeValue && !args_.empty()) {
          value_remaining_ = static_cast<uint64_t>(*n);
          state_ = State::kLargeDecision;
          argv_.clear();
          for (const Arg& a : args_) argv_.emplace_back(buf_.get() + a.offset, a.length);
          return Event::kLargeValue;
        }
        state_ = State::kArgData;
        break;
      }
      case State::kArgData: {
        size_t need = static_cast<size_t>(bulk_len_) + 2;
        if (wpos_ - rpos_ < need) return Event::kNeedMore;
        // Like Redis, the two bytes after the data are skipped unchecked.
        args_.push_back({rpos_, static_cast<size_t>(bulk_len_)});
        rpos_ += need;
        if (static_cast<int64_t>(args_.size()) == args_expected_) return finish_command();
        state_ = State::kArgHeader;
        break;
      }
      case State::kLargeDecision:
        // The caller did not choose: keep the value as a normal argument.
        state_ = State::kArgData;
        break;
      case State::kValue:
        consume_value_bytes();
        if (value_remaining_ > 0) return Event::kNeedMore;
        state_ = State::kValueEnd;
        break;
      case State::kValueEnd: {
        if (wpos_ - rpos_ < 2) return Event::kNeedMore;
        rpos_ += 2;
        if (dead_end_ + 2 == rpos_) dead_end_ = rpos_;
        args_.push_back({0, 0});
        if (static_cast<int64_t>(args_.size()) == args_expected_) return finish_command();
        state_ = State::kArgHeader;
        break;
      }
      case State::kDone:
        break;
    }
  }
}

RespParser::Event RespParser::parse_inline() {
  const char* start = buf_.get() + rpos_;
  const void* nl = std::memchr(start, '\n', wpos_ - rpos_);
  if (nl == nullptr) {
    if (static_cast<int64_t>(wpos_ - rpos_) > limits_.max_inline_len)
      return fail("too big inline request");
    return Event::kNeedMore;
  }
  size_t end = static_cast<size_t>(static_cast<const char*>(nl) - buf_.get());
  size_t line_end = end;
  if (line_end > rpos_ && buf_[line_end - 1] == '\r') --line_end;
  if (!split_inline_args(std::string_view(start, line_end - rpos_), inline_args_))
    return fail("unbalanced quotes in request");
  rpos_ = end + 1;
  if (inline_args_.empty()) return Event::kNeedMore;  // next() goes on
  argv_.clear();
  for (const std::string& a : inline_args_) argv_.emplace_back(a);
  state_ = State::kDone;
  return Event::kCommand;
}

RespParser::Event RespParser::finish_command() {
  argv_.clear();
  for (const Arg& a : args_) {
    argv_.emplace_back(a.length > 0 ? std::string_view(buf_.get() + a.offset, a.length)
                                    : std::string_view());
  }
  state_ = State::kDone;
  return Event::kCommand;
}

void RespParser::stream_into(ValueSink* sink) {
  value_mode_ = ValueMode::kStream;
  writer_ = sink;
  value_index_ = args_.size();
  state_ = State::kValue;
  dead_begin_ = dead_end_ = rpos_;
}

void RespParser::discard() {
  value_mode_ = ValueMode::kDiscard;
  writer_ = nullptr;
  value_index_ = args_.size();
  state_ = State::kValue;
  dead_begin_ = dead_end_ = rpos_;
}

void RespParser::buffer() {
  state_ = State::kArgData;
}

void RespParser::consume_value_bytes() {
  size_t take = static_cast<size_t>(
      std::min<uint64_t>(value_remaining_, static_cast<uint64_t>(wpos_ - rpos_)));
  if (take == 0) return;
  if (writer_ != nullptr) writer_->append(std::string_view(buf_.get() + rpos_, take));
  rpos_ += take;
  dead_end_ = rpos_;
  value_remaining_ -= take;
}

bool RespParser::wants_direct() const {
  return state_ == State::kValue && writer_ != nullptr && rpos_ == wpos_ && value_remaining_ > 0;
}

std::span<char> RespParser::direct_span() {
  auto [data, size] = writer_->next_writable();
  size_t n = static_cast<size_t>(std::min<uint64_t>(size, value_remaining_));
  return {data, n};
}

void RespParser::direct_commit(size_t n) {
  writer_->advance(n);
  value_remaining_ -= n;
}

}  // namespace tierkv::server
