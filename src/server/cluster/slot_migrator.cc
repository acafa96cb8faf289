#include "server/cluster/slot_migrator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "cluster/etcd_client.h"
#include "cluster/key_slot.h"
#include "core/clock.h"
#include "core/status_wait.h"

namespace tierkv::server {
namespace {

constexpr size_t kScanCount = 1000;
constexpr auto kRetryPause = std::chrono::milliseconds(200);
// A copy for the new owner is no access: it neither warms nor promotes.
const ReadOptions kNoAccess{.window = {}, .use_once = false, .count_access = false};

std::string address_of(const cluster::ClusterNode& node) {
  return fmt::format("{}:{}", node.host, node.port);
}

// The request up to the value's bytes, and after them: ASKING, then
// SET key <value> [PXAT ms].
std::string set_head(std::string_view key, uint64_t size, int64_t expire_at_ms) {
  std::string out;
  RespClient::append_command(out, {"ASKING"});
  out += fmt::format("*{}\r\n$3\r\nSET\r\n${}\r\n", expire_at_ms > 0 ? 5 : 3, key.size());
  out += key;
  out += fmt::format("\r\n${}\r\n", size);
  return out;
}

std::string set_tail(int64_t expire_at_ms) {
  std::string out = "\r\n";
  if (expire_at_ms > 0) {
    const std::string at = std::to_string(expire_at_ms);
    out += fmt::format("$4\r\nPXAT\r\n${}\r\n{}\r\n", at.size(), at);
  }
  return out;
}

// Refusals that pass on their own: the target has not seen the map yet
// (MOVED, CLUSTERDOWN), is still clearing the slot (TRYAGAIN), loading, or
// full. Any other refusal needs the operator (a wrong masterauth, a failing
// flash), and is reported at once.
bool transient(std::string_view error) {
  for (std::string_view p : {"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "BUSY", "OOM"}) {
    if (error.starts_with(p)) return true;
  }
  return false;
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

struct SlotMigrator::Connection {
  std::string address;
  RespClient client;
  std::string out;  // requests being built, reused: no fresh pages per batch
};

bool SlotMigrator::Plan::empty() const {
  return std::all_of(target_of.begin(), target_of.end(), [](uint16_t t) { return t == kStay; });
}

const cluster::ClusterNode* SlotMigrator::Plan::target(uint16_t slot) const {
  return target_of[slot] == kStay ? nullptr : &targets[target_of[slot]];
}

bool SlotMigrator::Plan::same_moves(const Plan& other) const {
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
    const cluster::ClusterNode* a = target(static_cast<uint16_t>(s));
    const cluster::ClusterNode* b = other.target(static_cast<uint16_t>(s));
    if ((a == nullptr) != (b == nullptr) || (a != nullptr && !(*a == *b))) return false;
  }
  return true;
}

SlotMigrator::SlotMigrator(Store& store, KeyFence& fence, Counter& keys_out,
                           SlotMigratorOptions options)
    : store_(store),
      fence_(fence),
      keys_out_(keys_out),
      options_(std::move(options)),
      thread_([this](std::stop_token stop) { run(stop); }) {}

SlotMigrator::~SlotMigrator() {
  thread_.request_stop();
  wake_.notify_all();
  std::lock_guard lock(link_mu_);
  if (link_) link_->client.shutdown();  // a blocked send or receive ends now
}

void SlotMigrator::on_map(const cluster::SlotMap& next) {
  Plan plan;
  plan.version = next.version();
  const std::optional<size_t> self = next.index_of(options_.self_id);
  std::map<size_t, uint16_t> index;  // map's node index -> plan's
  uint64_t moving = 0;
  for (uint32_t s = 0; self && s < cluster::kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    const size_t to = next.moving_to(slot);
    if (next.owner(slot) != *self || to == cluster::SlotMap::kNoNode) continue;
    auto [it, added] = index.try_emplace(to, static_cast<uint16_t>(plan.targets.size()));
    if (added) plan.targets.push_back(next.nodes()[to]);
    plan.target_of[s] = it->second;
    ++moving;
  }
  slots_moving_.store(moving, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  plan.epoch = latest_.same_moves(plan) ? latest_.epoch : latest_.epoch + 1;
  latest_ = std::move(plan);
  ++generation_;
  wake_.notify_all();
}

SlotMigrator::Stats SlotMigrator::stats() const {
  Stats s;
  s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  s.keys_dropped = keys_dropped_.load(std::memory_order_relaxed);
  s.passes = passes_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.slots_moving = slots_moving_.load(std::memory_order_relaxed);
  s.last_pass_ms = last_pass_ms_.load(std::memory_order_relaxed);
  s.last_pass_bytes = last_pass_bytes_.load(std::memory_order_relaxed);
  s.pass_progress = static_cast<double>(progress_cursor_.load(std::memory_order_relaxed)) /
                    18446744073709551616.0;  // 2^64: the scan cursor is a hash
  return s;
}

void SlotMigrator::run(std::stop_token stop) {
  std::optional<uint64_t> done;  // the epoch of the last plan fully moved
  uint64_t seen = 0;
  bool retry = false;
  while (!stop.stop_requested()) {
    Plan plan;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, stop, [&] { return retry || generation_ != seen; });
      if (stop.stop_requested()) return;
      seen = generation_;
      plan = latest_;
    }
    retry = false;
    if (plan.empty()) {
      clear_stall();  // nothing is moving: nothing is stalled
      continue;
    }
    if (done != plan.epoch) {
      if (!pass(stop, plan)) {
        retry = !stop.stop_requested() && current(plan) && pause(stop, kRetryPause);
        continue;
      }
      done = plan.epoch;
      clear_stall();
    }
    if (!report(plan)) retry = pause(stop, kRetryPause);
  }
}

bool SlotMigrator::current(const Plan& plan) const {
  std::lock_guard lock(mu_);
  return latest_.epoch == plan.epoch;
}

bool SlotMigrator::pause(std::stop_token& stop, std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  wake_.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

bool SlotMigrator::pass(std::stop_token& stop, const Plan& plan) {
  spdlog::info("cluster: moving the keys of slots leaving with map version {}", plan.version);
  const auto started = std::chrono::steady_clock::now();
  const uint64_t bytes_before = bytes_out_.load(std::memory_order_relaxed);
  uint64_t cursor = 0;
  do {
    ScanPage page = store_.scan(cursor, kScanCount);
    std::vector<std::vector<std::string>> by_target(plan.targets.size());
    for (std::string& key : page.keys) {
      const uint16_t t = plan.target_of[cluster::key_slot(key)];
      if (t != Plan::kStay) by_target[t].push_back(std::move(key));
    }
    for (size_t t = 0; t < by_target.size(); ++t) {
      std::vector<std::string>& keys = by_target[t];
      for (size_t i = 0; i < keys.size(); i += options_.batch_keys) {
        const size_t end = std::min(keys.size(), i + options_.batch_keys);
        std::vector<std::string> batch(std::make_move_iterator(keys.begin() + i),
                                       std::make_move_iterator(keys.begin() + end));
        if (!move_batch(stop, plan, plan.targets[t], std::move(batch))) return false;
      }
    }
    cursor = page.next_cursor;
    progress_cursor_.store(cursor, std::memory_order_relaxed);
  } while (cursor != 0 && !stop.stop_requested());
  progress_cursor_.store(0, std::memory_order_relaxed);
  if (stop.stop_requested()) return false;
  passes_.fetch_add(1, std::memory_order_relaxed);
  const auto took = std::chrono::steady_clock::now() - started;
  last_pass_ms_.store(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
      std::memory_order_relaxed);
  last_pass_bytes_.store(bytes_out_.load(std::memory_order_relaxed) - bytes_before,
                         std::memory_order_relaxed);
  return true;
}

bool SlotMigrator::move_batch(std::stop_token& stop, const Plan& plan,
                              const cluster::ClusterNode& target, std::vector<std::string> keys) {
  const auto since = std::chrono::steady_clock::now();
  for (;;) {
    if (fence_.fence(keys, options_.fence_timeout)) {
      const Status st = send_fenced(stop, plan, target, keys, since);
      fence_.unfence(keys);
      if (st.is_ok()) return true;
    }
    // Refused, or a command on one of the keys runs long (a large value
    // still streaming in): clients may use the keys meanwhile.
    if (!current(plan) || !pause(stop, kRetryPause)) return false;
  }
}

Status SlotMigrator::send_fenced(std::stop_token& stop, const Plan& plan,
                                 const cluster::ClusterNode& target,
                                 const std::vector<std::string>& keys,
                                 std::chrono::steady_clock::time_point since) {
  StatusWait removals;  // the tombstones of the keys the target took
  // A send cut mid-way leaves keys in doubt (the target may hold them, the
  // acknowledgement lost): they stay fenced until an attempt settles them.
  bool in_doubt = false;
  Status st;
  for (;;) {
    st = connect(target);
    if (st.is_ok()) {
      st = send_batch(*link_, keys, removals);
      in_doubt = !st.is_ok() && st.code() != StatusCode::kBusy;
    }
    if (st.is_ok()) {
      clear_stall();
      break;
    }
    if (st.code() != StatusCode::kBusy) set_link(nullptr);  // the stream may be cut mid-request
    retries_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("cluster: moving keys to {}: {}; again", address_of(target), st.to_string());
    const bool refused = st.code() == StatusCode::kBusy && !transient(st.message());
    if (refused || std::chrono::steady_clock::now() - since >= options_.io_timeout)
      publish_stall(plan, target, st);
    if (!in_doubt || !current(plan) || !pause(stop, kRetryPause)) break;
  }
  // The keys that moved stay gone here through a kill -9 or a restart: their
  // tombstones are on the device before any client can reach them on the
  // target (until the fence lifts, they answer -TRYAGAIN here).
  if (Status landed = removals.wait(); !landed.is_ok())
    spdlog::error(
        "cluster: a moved key's tombstone did not land ({}); after a crash this node "
        "may hold it again",
        landed.to_string());
  return st;
}

Status SlotMigrator::connect(const cluster::ClusterNode& target) {
  const std::string address = address_of(target);
  if (link_ && link_->address == address) return Status::ok();
  set_link(nullptr);
  Result<RespClient> c = RespClient::connect(address, options_.io_timeout);
  if (!c.is_ok()) return c.status();
  const MigratorCredentials login =
      options_.credentials ? options_.credentials() : MigratorCredentials{};
  std::vector<std::vector<std::string>> hello;
  if (!login.password.empty()) {
    hello.push_back(login.user.empty()
                        ? std::vector<std::string>{"AUTH", login.password}
                        : std::vector<std::string>{"AUTH", login.user, login.password});
  }
  hello.push_back({"CLIENT", "SETNAME", std::string(kMigratorClientName)});
  for (const std::vector<std::string>& command : hello) {
    Result<RespValue> reply = c->command(command);
    if (!reply.is_ok()) return reply.status();
    // A refusal (NOAUTH: masterauth unset; WRONGPASS): the target spoke.
    // One that wants no password at all is no refusal.
    if (reply->type == RespValue::Type::kError &&
        !reply->text.starts_with("ERR AUTH <password> called without any password"))
      return Status::busy(reply->text);
  }
  set_link(std::make_unique<Connection>(Connection{address, std::move(*c), {}}));
  return Status::ok();
}

void SlotMigrator::publish_stall(const Plan& plan, const cluster::ClusterNode& target,
                                 const Status& why) {
  cluster::MoveStall stall{plan.version, target.id, why.message()};
  // Said again every second while it lasts: a command that began watching
  // after the first word hears it too.
  const auto now = std::chrono::steady_clock::now();
  const bool same = stall_published_ && stall_published_->to_json() == stall.to_json();
  if (same && now - stall_published_at_ < std::chrono::seconds(1)) return;
  stall_published_at_ = now;
  if (!same)
    spdlog::warn("cluster: keys cannot move to {}: {}; they stay here, and the move goes on trying",
                 address_of(target), why.message());
  cluster::EtcdClient etcd({options_.etcd_endpoints, options_.etcd_timeout});
  const std::string key = cluster::stall_key(options_.cluster_name, options_.self_id);
  if (etcd.put(key, stall.to_json()).is_ok()) stall_published_ = std::move(stall);
}

void SlotMigrator::clear_stall() {
  if (!stall_published_ && !stall_unknown_) return;
  cluster::EtcdClient etcd({options_.etcd_endpoints, options_.etcd_timeout});
  if (etcd.del(cluster::stall_key(options_.cluster_name, options_.self_id)).is_ok()) {
    stall_published_.reset();
    stall_unknown_ = false;
  }
}

void SlotMigrator::set_link(std::unique_ptr<Connection> link) {
  std::lock_guard lock(link_mu_);
  link_ = std::move(link);
  // Made after the destructor cut the old one: cut it too.
  if (link_ && thread_.get_stop_token().stop_requested()) link_->client.shutdown();
}

Status SlotMigrator::send_batch(Connection& link, const std::vector<std::string>& keys,
                                StatusWait& removals) {
  std::string& out = link.out;
  out.clear();
  struct Sent {
    const std::string* key;
    uint64_t version, size;
  };
  std::vector<Sent> sent;
  auto settle_all = [&]() -> Status {
    TIERKV_RETURN_IF_ERROR(link.client.send(out));
    out.clear();
    Status first = Status::ok();
    for (const Sent& s : sent) {
      Status st = settle(link, *s.key, s.version, s.size, removals);
      if (!st.is_ok() && st.code() != StatusCode::kBusy) return st;  // the link is gone
      if (first.is_ok()) first = st;
    }
    sent.clear();
    return first;
  };
  Status busy = Status::ok();
  for (const std::string& key : keys) {
    std::optional<ObjectInfo> info = store_.stat_brief(key);
    if (!info) continue;  // gone already (moved by an earlier attempt, or expired)
    if (info->expire_at_ms > 0 && info->expire_at_ms <= unix_time_ms()) {
      store_.remove(key, info->version);
      continue;
    }
    if (info->size > options_.batch_bytes) {
      Status st = settle_all();
      if (st.is_ok()) st = send_large(link, key, *info, removals);
      if (!st.is_ok() && st.code() != StatusCode::kBusy) return st;
      if (busy.is_ok()) busy = st;
      continue;
    }
    Result<ObjectView> view = store_.get_range(key, 0, info->size, kNoAccess);
    if (!view.is_ok()) continue;  // gone meanwhile
    out += set_head(key, view->length(), view->expire_at_ms());
    view->append_to(out);
    out += set_tail(view->expire_at_ms());
    sent.push_back({&key, view->version(), view->length()});
    // Out the door once a piece is buffered: the batch stays pipelined, but
    // never held whole (64 values of 4 MiB would be 256 MiB here).
    if (out.size() >= options_.piece_bytes) {
      if (Status st = link.client.send(out); !st.is_ok()) return st;
      out.clear();
    }
  }
  Status st = settle_all();
  return st.is_ok() ? busy : st;
}

Status SlotMigrator::send_large(Connection& link, const std::string& key, const ObjectInfo& info,
                                StatusWait& removals) {
  TIERKV_RETURN_IF_ERROR(link.client.send(set_head(key, info.size, info.expire_at_ms)));
  for (uint64_t offset = 0; offset < info.size;) {
    const uint64_t length = std::min(options_.piece_bytes, info.size - offset);
    Result<ObjectView> piece = store_.get_range(key, offset, length, kNoAccess);
    // Changed or gone under the fence (expiry, eviction): cut the link, so
    // the target drops what it received.
    if (!piece.is_ok() || piece->version() != info.version || piece->length() != length)
      return Status::io_error("value changed while it was sent");
    for (size_t i = 0; i < piece->segment_count(); ++i)
      TIERKV_RETURN_IF_ERROR(link.client.send(piece->segment(i)));
    offset += length;
  }
  TIERKV_RETURN_IF_ERROR(link.client.send(set_tail(info.expire_at_ms)));
  return settle(link, key, info.version, info.size, removals);
}

Status SlotMigrator::settle(Connection& link, const std::string& key, uint64_t version,
                            uint64_t size, StatusWait& removals) {
  Result<RespValue> asking = link.client.read_reply();
  if (!asking.is_ok()) return asking.status();
  Result<RespValue> set = link.client.read_reply();
  if (!set.is_ok()) return set.status();
  if (set->type == RespValue::Type::kError) {
    // Anything but "never": the key stays here, and the batch goes again.
    if (!refused_for_good(set->text)) return Status::busy(set->text);
    spdlog::warn("cluster: {} refused key of {} bytes ({}); dropped here", link.address, size,
                 set->text);
    keys_dropped_.fetch_add(1, std::memory_order_relaxed);
  } else {
    keys_out_.add();
    bytes_out_.fetch_add(size, std::memory_order_relaxed);
  }
  if (!store_.remove(key, version, removals.arrival())) {
    // Changed after all (nothing should, under the fence): the target has
    // an older value, so the batch goes again with the new one.
    std::optional<ObjectInfo> now = store_.stat_brief(key);
    if (now && now->version != version) return Status::busy("key changed while it moved");
  }
  return Status::ok();
}

bool SlotMigrator::report(const Plan& plan) {
  cluster::MoveReport r;
  r.version = plan.version;
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
    if (const cluster::ClusterNode* t = plan.target(static_cast<uint16_t>(s)))
      r.add(static_cast<uint16_t>(s), t->id);
  }
  cluster::EtcdClient etcd({options_.etcd_endpoints, options_.etcd_timeout});
  Status st =
      etcd.put(cluster::moved_key(options_.cluster_name, options_.self_id), r.to_json()).status();
  if (st.is_ok()) {
    spdlog::info("cluster: slots leaving with map version {} have moved", plan.version);
  } else {
    spdlog::warn("cluster: cannot report moved slots: {}", st.to_string());
  }
  return st.is_ok();
}

}  // namespace tierkv::server
