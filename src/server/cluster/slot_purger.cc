#include "server/cluster/slot_purger.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "cluster/key_slot.h"
#include "core/durable_file.h"
#include "core/status_wait.h"

namespace tierkv::server {
namespace {

// A slot is this node's when it owns it or imports it (its keys arrive
// before the map flips).
bool mine(const cluster::SlotMap& map, uint16_t slot, size_t self) {
  return map.held_since(slot, self).has_value();
}

}  // namespace

SlotPurger::SlotPurger(Store& store, SlotPurgerOptions options)
    : store_(store), options_(std::move(options)), pending_(cluster::kSlotCount) {
  load_state();
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

SlotPurger::~SlotPurger() {
  thread_.request_stop();
  wake_.notify_all();
}

bool SlotPurger::clean(const cluster::SlotMap* old, const cluster::SlotMap& next, uint16_t slot,
                       size_t self) const {
  const uint64_t since = next.held_since(slot, self).value_or(0);
  const std::optional<size_t> self_old = old ? old->index_of(options_.self_id) : std::nullopt;
  if (since == 0) {  // a map written by hand: only the maps seen can tell
    return old ? self_old && mine(*old, slot, *self_old) : next.owner(slot) == self;
  }
  if (old && !(self_old && mine(*old, slot, *self_old))) return false;
  return since <= (old ? old->version() : base_version_);
}

bool SlotPurger::may_hold_orphans(const cluster::SlotMap* old, std::optional<size_t> self_old,
                                  const cluster::SlotMap& next, uint16_t slot) const {
  if (pending_[slot].load(std::memory_order_acquire) != 0) return false;  // already going
  if (!old || !self_old) return true;
  // A slot it did not hold in the map served before has had no keys
  // written here since that map's purge.
  if (!mine(*old, slot, *self_old)) return false;
  // A move it finished left none: a flip would otherwise cost a scan.
  const size_t target = old->moving_to(slot);
  return old->owner(slot) != *self_old || target == cluster::SlotMap::kNoNode ||
         next.index_of(old->nodes()[target].id) != next.owner(slot);
}

void SlotPurger::mark(const cluster::SlotMap* old, const cluster::SlotMap& next) {
  const std::optional<size_t> self = next.index_of(options_.self_id);
  size_t marked = 0;
  {
    MutexLock lock(mu_);
    const uint64_t generation = ++generation_;
    const std::optional<size_t> self_old = old ? old->index_of(options_.self_id) : std::nullopt;
    for (uint32_t s = 0; self && s < cluster::kSlotCount; ++s) {
      const auto slot = static_cast<uint16_t>(s);
      const bool stale = mine(next, slot, *self) ? !clean(old, next, slot, *self)
                                                 : may_hold_orphans(old, self_old, next, slot);
      if (!stale) continue;
      pending_[s].store(generation, std::memory_order_release);
      ++marked;
    }
    served_version_ = next.version();
  }
  // Before the map is served: a restart then knows what this node held.
  save_state();
  if (marked > 0) {
    spdlog::info("cluster: map version {}: the old keys of {} slots go (gained slots serve after)",
                 next.version(), marked);
    wake_.notify_all();
  }
}

void SlotPurger::run(std::stop_token stop) {
  uint64_t done = 0;  // every mark up to this generation is purged
  while (!stop.stop_requested()) {
    uint64_t target;
    {
      MutexLock lock(mu_);
      wake_.wait(mu_, stop, [&] {
        mu_.assert_held();
        return generation_ > done;
      });
      if (stop.stop_requested()) return;
      target = generation_;
    }
    // A scan sees the keys on flash only once they are loaded: a purge
    // that ran before would leave them, and they would be served after.
    while (!store_.wait_loaded_for(std::chrono::milliseconds(100))) {
      if (stop.stop_requested()) return;
    }
    purge_pass(stop, target);
    if (stop.stop_requested()) return;
    // Marks up to `target` were set before this pass began: they are done.
    for (auto& p : pending_) {
      uint64_t g = p.load(std::memory_order_acquire);
      if (g != 0 && g <= target) p.compare_exchange_strong(g, 0, std::memory_order_acq_rel);
    }
    save_state();
    done = target;
  }
}

void SlotPurger::purge_pass(std::stop_token& stop, uint64_t generation) {
  uint64_t cursor = 0;
  uint64_t removed = 0;
  StatusWait tombstones;  // the purge is done once they are on the device
  do {
    ScanPage page = store_.scan(cursor, 1000);
    for (const std::string& key : page.keys) {
      const uint64_t g = pending_[cluster::key_slot(key)].load(std::memory_order_acquire);
      if (g != 0 && g <= generation && store_.remove(key, std::nullopt, tombstones.arrival()))
        ++removed;
    }
    cursor = page.next_cursor;
  } while (cursor != 0 && !stop.stop_requested());
  if (Status st = tombstones.wait(); !st.is_ok())
    spdlog::error("cluster: purged keys' tombstones did not land ({})", st.to_string());
  keys_purged_.fetch_add(removed, std::memory_order_relaxed);
  if (removed > 0) spdlog::info("cluster: removed {} old keys", removed);
}

// The state file: {"cluster": name, "node": id, "version": v,
//                  "purging": [[first, last], ...]}.
void SlotPurger::save_state() {
  if (options_.state_path.empty()) return;
  MutexLock file_lock(state_mu_);
  nlohmann::json purging = nlohmann::json::array();
  uint64_t version;
  {
    // mark() sets a map's version and its marks under mu_: read both in one
    // step, or a file could name a new version without its new marks.
    MutexLock lock(mu_);
    version = served_version_;
    for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
      if (pending_[s].load(std::memory_order_acquire) == 0) continue;
      if (!purging.empty() && purging.back()[1].get<uint32_t>() + 1 == s) {
        purging.back()[1] = s;
      } else {
        purging.push_back({s, s});
      }
    }
  }
  const nlohmann::json state{{"cluster", options_.cluster_name},
                             {"node", options_.self_id},
                             {"version", version},
                             {"purging", purging}};
  if (Status st = write_file_durably(options_.state_path, state.dump()); !st.is_ok())
    spdlog::error("cluster: cannot keep the node's slot state: {}", st.to_string());
}

void SlotPurger::load_state() {
  if (options_.state_path.empty()) return;
  Result<std::string> text = read_small_file(options_.state_path);
  if (!text.is_ok()) {
    if (text.status().code() != StatusCode::kNotFound)
      spdlog::error("cluster: {}; every slot this node holds starts empty",
                    text.status().to_string());
    return;
  }
  const nlohmann::json state = nlohmann::json::parse(*text, nullptr, false);
  try {
    if (state.at("cluster") != options_.cluster_name || state.at("node") != options_.self_id) {
      spdlog::warn("cluster: {} is another node's; every slot this node holds starts empty",
                   options_.state_path);
      return;
    }
    const uint64_t version = state.at("version").get<uint64_t>();
    for (const nlohmann::json& r : state.at("purging")) {
      const uint32_t first = r.at(0).get<uint32_t>(), last = r.at(1).get<uint32_t>();
      for (uint32_t s = first; s <= last && s < cluster::kSlotCount; ++s)
        pending_[s].store(1, std::memory_order_release);
    }
    MutexLock lock(mu_);  // before the thread starts; taken for the analysis
    generation_ = 1;      // the unfinished purges start at once
    base_version_ = served_version_ = version;
  } catch (const nlohmann::json::exception& e) {
    spdlog::error("cluster: {} does not parse ({}); every slot this node holds starts empty",
                  options_.state_path, e.what());
  }
}

}  // namespace tierkv::server
