#include "server/cluster/key_sender.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/clock.h"

namespace tierkv::server {
namespace {

// A copy for the new owner is no access: it neither warms nor promotes.
const ReadOptions kNoAccess{.window = {}, .use_once = false, .count_access = false};

// The request up to the value's bytes, and after them: ASKING, then
// SET key <value> [PXAT ms].
void append_set_head(std::string& out, std::string_view key, uint64_t size, int64_t expire_at_ms) {
  RespClient::append_command(out, {"ASKING"});
  out += fmt::format("*{}\r\n$3\r\nSET\r\n${}\r\n", expire_at_ms > 0 ? 5 : 3, key.size());
  out += key;
  out += fmt::format("\r\n${}\r\n", size);
}

void append_set_tail(std::string& out, int64_t expire_at_ms) {
  out += "\r\n";
  if (expire_at_ms > 0) {
    const std::string at = std::to_string(expire_at_ms);
    out += fmt::format("$4\r\nPXAT\r\n${}\r\n{}\r\n", at.size(), at);
  }
}

// The one refusal that drops a key: the target can never hold it (its key
// or value is larger than the target's limits). The key is then a miss, as
// a cache allows; every other refusal leaves it here.
bool refused_for_good(std::string_view error) {
  for (std::string_view p : {"exceeds max-object-size", "exceeds max-key-size",
                             "invalid bulk length", "exceeds maximum allowed size"}) {
    if (error.find(p) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<KeySender>> KeySender::connect(Store& store, MoveCounters& counters,
                                                      const cluster::ClusterNode& target,
                                                      const MigratorCredentials& login,
                                                      const KeySenderOptions& options) {
  std::string address = fmt::format("{}:{}", target.host, target.port);
  Result<RespClient> c = connect_peer(target, login, kMigratorClientName, options.io_timeout);
  if (!c.is_ok()) return c.status();
  return std::unique_ptr<KeySender>(
      new KeySender(store, counters, std::move(address), std::move(*c), options));
}

KeySender::KeySender(Store& store, MoveCounters& counters, std::string address, RespClient client,
                     const KeySenderOptions& options)
    : store_(store),
      counters_(counters),
      address_(std::move(address)),
      client_(std::move(client)),
      options_(options) {}

Status KeySender::send(const std::vector<std::string>& keys, StatusWait& removals) {
  Status busy = Status::ok();
  auto note = [&busy](Status st) {
    if (busy.is_ok()) busy = std::move(st);
  };
  for (const std::string& key : keys) {
    std::optional<ObjectInfo> info = store_.stat_brief(key);
    if (!info) continue;  // gone already (moved by an earlier attempt, or expired)
    if (info->expire_at_ms > 0 && info->expire_at_ms <= unix_time_ms()) {
      store_.remove(key, info->version);
      continue;
    }
    if (info->size > options_.batch_bytes) {
      Status st = settle_sent(removals);
      if (st.is_ok()) st = send_large(key, *info, removals);
      if (!st.is_ok() && st.code() != StatusCode::kBusy) return st;
      note(std::move(st));
      continue;
    }
    Result<ObjectView> view = store_.get(key, 0, info->size, kNoAccess);
    if (!view.is_ok()) continue;  // gone meanwhile
    sent_.push_back({&key, view->version(), view->length()});
    queue(key, std::move(*view));
    // Out the door once a piece is pinned: the batch stays pipelined, but
    // never held whole (64 values of 4 MiB would pin 256 MiB).
    if (queued_bytes_ >= options_.piece_bytes) TIERKV_RETURN_IF_ERROR(flush());
  }
  Status st = settle_sent(removals);
  if (!st.is_ok() && st.code() != StatusCode::kBusy) return st;
  note(std::move(st));
  return busy;
}

void KeySender::queue(const std::string& key, ObjectView value) {
  const size_t begin = framing_.size();
  append_set_head(framing_, key, value.length(), value.expire_at_ms());
  // The previous key's tail and this head are one piece.
  if (!pieces_.empty() && pieces_.back().value < 0) {
    pieces_.back().framing_end = framing_.size();
  } else {
    pieces_.push_back({begin, framing_.size(), -1});
  }
  queued_bytes_ += value.length();
  const int64_t expire_at_ms = value.expire_at_ms();
  pieces_.push_back({0, 0, static_cast<ptrdiff_t>(values_.size())});
  values_.push_back(std::move(value));
  const size_t tail = framing_.size();
  append_set_tail(framing_, expire_at_ms);
  pieces_.push_back({tail, framing_.size(), -1});
}

Status KeySender::flush() {
  if (pieces_.empty()) return Status::ok();
  std::vector<std::string_view>& out = gather_;
  out.clear();
  for (const Piece& p : pieces_) {
    if (p.value < 0) {
      out.push_back(
          std::string_view(framing_).substr(p.framing_begin, p.framing_end - p.framing_begin));
    } else {
      values_[static_cast<size_t>(p.value)].for_each_segment(
          [&out](std::string_view s) { out.push_back(s); });
    }
  }
  Status st = client_.send(out);
  pieces_.clear();
  values_.clear();
  framing_.clear();
  queued_bytes_ = 0;
  return st;
}

Status KeySender::settle_sent(StatusWait& removals) {
  TIERKV_RETURN_IF_ERROR(flush());
  Status first = Status::ok();
  for (const Sent& s : sent_) {
    Status st = settle(s, removals);
    if (!st.is_ok() && st.code() != StatusCode::kBusy) return st;  // the link is gone
    if (first.is_ok()) first = std::move(st);
  }
  sent_.clear();
  return first;
}

Status KeySender::send_large(const std::string& key, const ObjectInfo& info, StatusWait& removals) {
  std::string head;
  append_set_head(head, key, info.size, info.expire_at_ms);
  TIERKV_RETURN_IF_ERROR(client_.send(std::string_view(head)));
  for (uint64_t offset = 0; offset < info.size;) {
    const uint64_t length = std::min(options_.piece_bytes, info.size - offset);
    Result<ObjectView> piece = store_.get(key, offset, length, kNoAccess);
    // Changed or gone under the fence (expiry, eviction): cut the link, so
    // the target drops what it received.
    if (!piece.is_ok() || piece->version() != info.version || piece->length() != length)
      return Status::io_error("value changed while it was sent");
    gather_.clear();
    piece->for_each_segment([this](std::string_view s) { gather_.push_back(s); });
    TIERKV_RETURN_IF_ERROR(client_.send(gather_));
    offset += length;
  }
  std::string tail;
  append_set_tail(tail, info.expire_at_ms);
  TIERKV_RETURN_IF_ERROR(client_.send(std::string_view(tail)));
  return settle({&key, info.version, info.size}, removals);
}

Status KeySender::settle(const Sent& sent, StatusWait& removals) {
  Result<RespValue> asking = client_.read_reply();
  if (!asking.is_ok()) return asking.status();
  if (asking->type == RespValue::Type::kError)
    return Status::io_error("the target refused ASKING: " + asking->text);
  Result<RespValue> set = client_.read_reply();
  if (!set.is_ok()) return set.status();
  if (set->type == RespValue::Type::kError) {
    // Anything but "never": the key stays here, and the batch goes again.
    if (!refused_for_good(set->text)) return Status::busy(set->text);
    spdlog::warn("cluster: {} refused key of {} bytes ({}); dropped here", address_, sent.size,
                 set->text);
    counters_.keys_dropped.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_.keys_out->add();
    counters_.bytes_out.fetch_add(sent.size, std::memory_order_relaxed);
  }
  if (!store_.remove(*sent.key, sent.version, removals.arrival()) && store_.stat_brief(*sent.key)) {
    // Still here: changed after all (nothing should, under the fence), or
    // not removable. Either way this node would go on serving it while the
    // target holds the copy, so the batch goes again (a retry that never
    // lands is published as a stall).
    return Status::busy("key changed while it moved, or could not be removed");
  }
  return Status::ok();
}

}  // namespace tierkv::server
