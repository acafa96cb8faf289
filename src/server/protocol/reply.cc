#include "server/protocol/reply.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "server/commands/command.h"

namespace tierkv::server {
namespace {

// An emptied reply buffer keeps its allocation up to this size, so the next
// replies do not allocate; a one-off huge reply does not pin memory forever.
constexpr size_t kKeptCapacity = 256 * 1024;

// Appends "<type><n>\r\n" without going through a format string.
void append_header(std::string& out, char type, int64_t n) {
  char buf[24];
  buf[0] = type;
  auto [end, ec] = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n);
  (void)ec;
  *end++ = '\r';
  *end++ = '\n';
  out.append(buf, static_cast<size_t>(end - buf));
}

// Redis never lets an error or status line break the protocol: CR and LF
// inside the text become spaces.
void append_line_text(std::string& out, std::string_view s) {
  size_t start = out.size();
  out.append(s);
  for (size_t i = start; i < out.size(); ++i) {
    if (out[i] == '\r' || out[i] == '\n') out[i] = ' ';
  }
}

}  // namespace

std::string_view ReplyBuffer::Segment::bytes() const {
  switch (kind) {
    case Kind::kOwned:
      return std::string_view(owned).substr(offset);
    case Kind::kView:
      return view.segment(view_segment).substr(offset);
    case Kind::kExternal:
      return external.substr(offset);
  }
  return {};
}

std::string& ReplyBuffer::tail_buffer() {
  if (segments_.empty() || segments_.back().kind != Kind::kOwned) segments_.emplace_back();
  return segments_.back().owned;
}

void ReplyBuffer::simple(std::string_view s) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  out.push_back('+');
  append_line_text(out, s);
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::error(std::string_view message) {
  ++errors_;
  std::string& out = tail_buffer();
  size_t before = out.size();
  out.push_back('-');
  append_line_text(out, message);
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::error(const Status& status) {
  ++errors_;
  std::string& out = tail_buffer();
  size_t before = out.size();
  out.push_back('-');
  out.append(error_prefix(status.code()));
  out.push_back(' ');
  append_line_text(out, status.message());
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::integer(int64_t v) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, ':', v);
  pending_ += out.size() - before;
}

void ReplyBuffer::bulk(std::string_view s) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, '$', static_cast<int64_t>(s.size()));
  out.append(s);
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::bulk(const ObjectView& view) {
  if (view.length() < kZeroCopyThreshold) {
    std::string& out = tail_buffer();
    size_t before = out.size();
    append_header(out, '$', static_cast<int64_t>(view.length()));
    view.append_to(out);
    out.append("\r\n");
    pending_ += out.size() - before;
    return;
  }
  {
    std::string& out = tail_buffer();
    size_t before = out.size();
    append_header(out, '$', static_cast<int64_t>(view.length()));
    pending_ += out.size() - before;
  }
  // One segment per chunk; each holds a copy of the view, so each keeps the
  // pins of the whole object alive until the last of them is written.
  for (size_t i = 0; i < view.segment_count(); ++i) {
    Segment& seg = segments_.emplace_back();
    seg.kind = Kind::kView;
    seg.view = view;
    seg.view_segment = i;
    pending_ += view.segment(i).size();
  }
  std::string& out = tail_buffer();
  out.append("\r\n");
  pending_ += 2;
}

void ReplyBuffer::null() {
  raw(proto_ == Proto::kResp3 ? std::string_view("_\r\n") : "$-1\r\n");
}

void ReplyBuffer::null_array() {
  raw(proto_ == Proto::kResp3 ? std::string_view("_\r\n") : "*-1\r\n");
}

void ReplyBuffer::array(size_t n) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, '*', static_cast<int64_t>(n));
  pending_ += out.size() - before;
}

void ReplyBuffer::map(size_t pairs) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  if (proto_ == Proto::kResp3) {
    append_header(out, '%', static_cast<int64_t>(pairs));
  } else {
    append_header(out, '*', static_cast<int64_t>(pairs * 2));
  }
  pending_ += out.size() - before;
}

void ReplyBuffer::set(size_t n) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, proto_ == Proto::kResp3 ? '~' : '*', static_cast<int64_t>(n));
  pending_ += out.size() - before;
}

void ReplyBuffer::dbl(double v) {
  // Redis 7.0 addReplyDouble: "inf"/"-inf" spelled out, otherwise %.17g.
  std::string text = std::isinf(v) ? std::string(v > 0 ? "inf" : "-inf") : format_double(v);
  if (proto_ == Proto::kResp2) {
    bulk(text);
    return;
  }
  std::string& out = tail_buffer();
  size_t before = out.size();
  out.push_back(',');
  out.append(text);
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::boolean(bool v) {
  if (proto_ == Proto::kResp3) {
    raw(v ? "#t\r\n" : "#f\r\n");
  } else {
    raw(v ? ":1\r\n" : ":0\r\n");
  }
}

void ReplyBuffer::verbatim(std::string_view s) {
  if (proto_ == Proto::kResp2) {
    bulk(s);
    return;
  }
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, '=', static_cast<int64_t>(s.size() + 4));
  out.append("txt:");
  out.append(s);
  out.append("\r\n");
  pending_ += out.size() - before;
}

void ReplyBuffer::raw(std::string_view bytes) {
  tail_buffer().append(bytes);
  pending_ += bytes.size();
}

void ReplyBuffer::bulk_header(uint64_t length) {
  std::string& out = tail_buffer();
  size_t before = out.size();
  append_header(out, '$', static_cast<int64_t>(length));
  pending_ += out.size() - before;
}

void ReplyBuffer::bulk_piece(std::string_view bytes, std::shared_ptr<const void> owner) {
  if (bytes.size() < kZeroCopyThreshold) return raw(bytes);
  Segment& seg = segments_.emplace_back();
  seg.kind = Kind::kExternal;
  seg.external = bytes;
  seg.owner = std::move(owner);
  pending_ += bytes.size();
}

void ReplyBuffer::splice(ReplyBuffer& other) {
  for (Segment& seg : other.segments_) {
    if (seg.bytes().empty()) continue;
    if (seg.kind == Kind::kOwned) {
      raw(seg.bytes());  // small replies: join the tail buffer
      continue;
    }
    segments_.push_back(std::move(seg));
    pending_ += segments_.back().bytes().size();
  }
  errors_ += other.errors_;
  other.segments_.clear();
  other.pending_ = 0;
  other.errors_ = 0;
}

void ReplyBuffer::gather(std::vector<std::string_view>& out, size_t max_segments) const {
  size_t added = 0;
  for (const Segment& seg : segments_) {
    if (added == max_segments) break;
    std::string_view b = seg.bytes();
    if (b.empty()) continue;
    out.push_back(b);
    ++added;
  }
}

void ReplyBuffer::consume(size_t n) {
  pending_ -= n;
  while (n > 0 || (!segments_.empty() && segments_.front().bytes().empty())) {
    Segment& front = segments_.front();
    size_t avail = front.bytes().size();
    size_t take = n < avail ? n : avail;
    front.offset += take;
    n -= take;
    if (take < avail) break;
    // Keep the last owned buffer (and its capacity) for the next replies.
    if (segments_.size() == 1 && front.kind == Kind::kOwned) {
      if (front.owned.capacity() > kKeptCapacity) {
        std::string().swap(front.owned);
      } else {
        front.owned.clear();
      }
      front.offset = 0;
      break;
    }
    segments_.pop_front();
  }
}

void ReplyBuffer::clear() {
  while (segments_.size() > 1) segments_.pop_back();
  if (!segments_.empty()) {
    if (segments_.front().kind != Kind::kOwned) {
      segments_.clear();
    } else {
      segments_.front().owned.clear();
      segments_.front().offset = 0;
    }
  }
  pending_ = 0;
}

}  // namespace tierkv::server
