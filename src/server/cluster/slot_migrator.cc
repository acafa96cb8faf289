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
// Batches waiting per stream: the next is ready when one ends.
constexpr size_t kQueuedBatches = 2;

std::string address_of(const cluster::ClusterNode& node) {
  return fmt::format("{}:{}", node.host, node.port);
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

}  // namespace

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
    : store_(store), fence_(fence), options_(std::move(options)) {
  counters_.keys_out = &keys_out;
  for (size_t i = 0; i < std::max<size_t>(1, options_.streams); ++i)
    streams_.push_back(std::make_unique<Stream>());
  for (const std::unique_ptr<Stream>& s : streams_)
    s->thread = std::thread([this, &stream = *s] { run_stream(stop_.get_token(), stream); });
  thread_ = std::thread([this] { run(stop_.get_token()); });
}

SlotMigrator::~SlotMigrator() {
  stop_.request_stop();
  {
    MutexLock lock(link_mu_);  // a blocked send or receive ends now
    for (const std::unique_ptr<Stream>& s : streams_) {
      for (auto& [address, link] : s->links) link->shutdown();
    }
  }
  thread_.join();
  for (const std::unique_ptr<Stream>& s : streams_) s->thread.join();
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
  MutexLock lock(mu_);
  plan.epoch = latest_.same_moves(plan) ? latest_.epoch : latest_.epoch + 1;
  latest_ = std::move(plan);
  ++generation_;
  wake_.notify_all();
}

SlotMigrator::Stats SlotMigrator::stats() const {
  Stats s;
  s.bytes_out = counters_.bytes_out.load(std::memory_order_relaxed);
  s.keys_dropped = counters_.keys_dropped.load(std::memory_order_relaxed);
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
    std::shared_ptr<const Plan> plan;
    {
      MutexLock lock(mu_);
      wake_.wait(mu_, stop, [&] {
        mu_.assert_held();
        return retry || generation_ != seen;
      });
      if (stop.stop_requested()) return;
      seen = generation_;
      plan = std::make_shared<const Plan>(latest_);
    }
    retry = false;
    if (plan->empty()) {
      clear_stall();  // nothing is moving: nothing is stalled
      continue;
    }
    if (done != plan->epoch) {
      if (!pass(stop, plan)) {
        retry = !stop.stop_requested() && current(*plan) && pause(stop, kRetryPause);
        continue;
      }
      done = plan->epoch;
      clear_stall();
    }
    if (!report(*plan)) retry = pause(stop, kRetryPause);
  }
}

bool SlotMigrator::current(const Plan& plan) const {
  MutexLock lock(mu_);
  return latest_.epoch == plan.epoch;
}

bool SlotMigrator::pause(std::stop_token stop, std::chrono::milliseconds d) {
  return sleep_unless_stopped(stop, d);
}

bool SlotMigrator::pass(std::stop_token stop, const std::shared_ptr<const Plan>& plan) {
  // The keys on flash are in a scan only once they are loaded: a pass
  // before would report slots empty that still hold them.
  while (!store_.wait_loaded_for(std::chrono::milliseconds(100))) {
    if (stop.stop_requested() || !current(*plan)) return false;
  }
  spdlog::info("cluster: moving the keys of slots leaving with map version {}", plan->version);
  const auto started = std::chrono::steady_clock::now();
  const uint64_t bytes_before = counters_.bytes_out.load(std::memory_order_relaxed);
  {
    MutexLock lock(mu_);
    pass_failed_ = false;
  }
  bool ok = true;
  uint64_t cursor = 0;
  do {
    ScanPage page = store_.scan(cursor, kScanCount);
    // Per target and stream; a key's stream is fixed by its hash.
    std::vector<std::vector<std::string>> groups(plan->targets.size() * streams_.size());
    for (std::string& key : page.keys) {
      const uint16_t t = plan->target_of[cluster::key_slot(key)];
      if (t == Plan::kStay) continue;
      const size_t s = std::hash<std::string_view>{}(key) % streams_.size();
      groups[t * streams_.size() + s].push_back(std::move(key));
    }
    for (size_t g = 0; ok && g < groups.size(); ++g) {
      std::vector<std::string>& keys = groups[g];
      for (size_t i = 0; ok && i < keys.size(); i += options_.batch_keys) {
        const size_t end = std::min(keys.size(), i + options_.batch_keys);
        Batch batch{plan, static_cast<uint16_t>(g / streams_.size()),
                    std::vector<std::string>(std::make_move_iterator(keys.begin() + i),
                                             std::make_move_iterator(keys.begin() + end))};
        ok = submit(stop, *streams_[g % streams_.size()], std::move(batch));
      }
    }
    cursor = page.next_cursor;
    progress_cursor_.store(cursor, std::memory_order_relaxed);
  } while (ok && cursor != 0 && !stop.stop_requested());
  ok = drain_streams(stop) && ok;
  progress_cursor_.store(0, std::memory_order_relaxed);
  if (!ok || stop.stop_requested()) return false;
  passes_.fetch_add(1, std::memory_order_relaxed);
  const auto took = std::chrono::steady_clock::now() - started;
  last_pass_ms_.store(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
      std::memory_order_relaxed);
  last_pass_bytes_.store(counters_.bytes_out.load(std::memory_order_relaxed) - bytes_before,
                         std::memory_order_relaxed);
  return true;
}

bool SlotMigrator::submit(std::stop_token stop, Stream& stream, Batch batch) {
  MutexLock lock(mu_);
  wake_.wait(mu_, stop, [&] {
    mu_.assert_held();
    return pass_failed_ || stream.batches.size() < kQueuedBatches;
  });
  if (pass_failed_ || stop.stop_requested()) return false;
  stream.batches.push_back(std::move(batch));
  wake_.notify_all();
  return true;
}

bool SlotMigrator::drain_streams(std::stop_token stop) {
  MutexLock lock(mu_);
  // Not cut short by stop: no stream may still run a batch of this pass
  // when the next one starts (each ends soon after stop, its links cut).
  wake_.wait(mu_, [&] {
    return std::all_of(streams_.begin(), streams_.end(), [](const std::unique_ptr<Stream>& s) {
      return s->batches.empty() && !s->busy;
    });
  });
  return !pass_failed_ && !stop.stop_requested();
}

void SlotMigrator::run_stream(std::stop_token stop, Stream& stream) {
  for (;;) {
    Batch batch;
    {
      MutexLock lock(mu_);
      wake_.wait(mu_, stop, [&] { return !stream.batches.empty(); });
      if (stream.batches.empty()) return;  // stopped
      batch = std::move(stream.batches.front());
      stream.batches.pop_front();
      stream.busy = true;
    }
    const bool moved = !stop.stop_requested() && move_batch(stop, stream, batch);
    MutexLock lock(mu_);
    stream.busy = false;
    if (!moved) pass_failed_ = true;
    wake_.notify_all();
  }
}

bool SlotMigrator::move_batch(std::stop_token stop, Stream& stream, const Batch& batch) {
  {
    MutexLock lock(mu_);
    if (pass_failed_) return false;  // another batch of this pass gave up
  }
  const auto since = std::chrono::steady_clock::now();
  for (;;) {
    if (fence_.fence(batch.keys, options_.fence_timeout)) {
      const Status st = send_fenced(stop, stream, batch, since);
      fence_.unfence(batch.keys);
      if (st.is_ok()) return true;
    }
    // Refused, or a command on one of the keys runs long (a large value
    // still streaming in): clients may use the keys meanwhile.
    if (!current(*batch.plan) || !pause(stop, kRetryPause)) return false;
  }
}

Status SlotMigrator::send_fenced(std::stop_token stop, Stream& stream, const Batch& batch,
                                 std::chrono::steady_clock::time_point since) {
  const cluster::ClusterNode& target = batch.plan->targets[batch.target];
  StatusWait removals;  // the tombstones of the keys the target took
  // A send cut mid-way leaves keys in doubt (the target may hold them, the
  // acknowledgement lost): they stay fenced until an attempt settles them.
  bool in_doubt = false;
  Status st;
  for (;;) {
    Result<KeySender*> sender = link(stream, target);
    st = sender.status();
    if (sender.is_ok()) {
      st = (*sender)->send(batch.keys, removals);
      in_doubt = !st.is_ok() && st.code() != StatusCode::kBusy;
    }
    if (st.is_ok()) {
      clear_stall(/*after_batch=*/true);
      break;
    }
    // The stream may be cut mid-request.
    if (st.code() != StatusCode::kBusy) set_link(stream, address_of(target), nullptr);
    retries_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("cluster: moving keys to {}: {}; again", address_of(target), st.to_string());
    const bool refused = st.code() == StatusCode::kBusy && !transient(st.message());
    if (refused || std::chrono::steady_clock::now() - since >= options_.send.io_timeout)
      publish_stall(*batch.plan, target, st);
    if (!in_doubt || !current(*batch.plan) || !pause(stop, kRetryPause)) break;
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

Result<KeySender*> SlotMigrator::link(Stream& stream, const cluster::ClusterNode& target) {
  const std::string address = address_of(target);
  if (auto it = stream.links.find(address); it != stream.links.end()) return it->second.get();
  const MigratorCredentials login =
      options_.credentials ? options_.credentials() : MigratorCredentials{};
  Result<std::unique_ptr<KeySender>> made =
      KeySender::connect(store_, counters_, target, login, options_.send);
  if (!made.is_ok()) return made.status();
  KeySender* sender = made->get();
  set_link(stream, address, std::move(*made));
  return sender;
}

void SlotMigrator::set_link(Stream& stream, const std::string& address,
                            std::unique_ptr<KeySender> link) {
  MutexLock lock(link_mu_);
  if (!link) {
    stream.links.erase(address);
    return;
  }
  // Made after the destructor cut the others: cut it too.
  if (stop_.stop_requested()) link->shutdown();
  stream.links[address] = std::move(link);
}

void SlotMigrator::publish_stall(const Plan& plan, const cluster::ClusterNode& target,
                                 const Status& why) {
  cluster::MoveStall stall{plan.version, target.id, why.message()};
  MutexLock lock(stall_mu_);
  // Said again every second while it lasts: a command that began watching
  // after the first word hears it too.
  const auto now = std::chrono::steady_clock::now();
  const bool same = stall_published_ && stall_published_->to_json() == stall.to_json();
  if (same && now - stall_published_at_ < std::chrono::seconds(1)) return;
  stall_published_at_ = now;
  if (!same)
    spdlog::warn("cluster: keys cannot move to {}: {}; they stay here, and the move goes on trying",
                 address_of(target), why.message());
  cluster::EtcdClient etcd(
      {options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  const std::string key = cluster::stall_key(options_.cluster_name, options_.self_id);
  if (etcd.put(key, stall.to_json()).is_ok()) stall_published_ = std::move(stall);
}

void SlotMigrator::clear_stall(bool after_batch) {
  MutexLock lock(stall_mu_);
  if (!stall_published_ && !stall_unknown_) return;
  const auto now = std::chrono::steady_clock::now();
  if (after_batch && now - stall_clear_failed_at_ < std::chrono::seconds(1)) return;
  cluster::EtcdClient etcd(
      {options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  if (etcd.del(cluster::stall_key(options_.cluster_name, options_.self_id)).is_ok()) {
    stall_published_.reset();
    stall_unknown_ = false;
  } else {
    stall_clear_failed_at_ = now;
  }
}

bool SlotMigrator::report(const Plan& plan) {
  cluster::MoveReport r;
  r.version = plan.version;
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
    if (const cluster::ClusterNode* t = plan.target(static_cast<uint16_t>(s)))
      r.add(static_cast<uint16_t>(s), t->id);
  }
  cluster::EtcdClient etcd(
      {options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
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
