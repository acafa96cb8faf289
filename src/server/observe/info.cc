#include "server/observe/info.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <fstream>

#include "cluster/controller.h"
#include "cluster/member.h"
#include "server/cluster/slot_migrator.h"
#include "server/cluster/slot_purger.h"
#include "server/net/loading.h"
#include "server/net/server.h"
#include "server/observe/sizing.h"

namespace tierkv::server {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t read_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// Redis's bytesToHuman.
std::string human_bytes(double n) {
  if (n < 1024) return fmt::format("{}B", static_cast<int64_t>(n));
  const char* units[] = {"K", "M", "G", "T", "P"};
  int i = -1;
  while (n >= 1024 && i < 4) {
    n /= 1024;
    ++i;
  }
  return fmt::format("{:.2f}{}", n, units[i]);
}

void section_server(Server& s, std::string& out) {
  struct utsname u {};
  uname(&u);
  Config c = s.context().config();
  int64_t uptime_s = (now_us() / 1000 - s.context().start_time_ms()) / 1000;
  out += "# Server\r\n";
  out += fmt::format("redis_version:{}\r\n", kRedisCompatVersion);
  out += fmt::format("tierkv_version:{}\r\n", kTierkvVersion);
  out += "redis_mode:standalone\r\n";
  out += fmt::format("os:{} {} {}\r\n", u.sysname, u.release, u.machine);
  out += "arch_bits:64\r\n";
  out += "multiplexing_api:epoll\r\n";
  out += fmt::format("process_id:{}\r\n", getpid());
  out += fmt::format("tcp_port:{}\r\n", s.tcp_port());
  out += fmt::format("server_time_usec:{}\r\n", now_us());
  out += fmt::format("uptime_in_seconds:{}\r\n", uptime_s);
  out += fmt::format("uptime_in_days:{}\r\n", uptime_s / 86400);
  out += fmt::format("io_threads:{}\r\n", s.io_thread_count());
  out += fmt::format("metrics_port:{}\r\n", s.metrics_port());
}

void section_clients(Server& s, std::string& out) {
  Config c = s.context().config();
  out += "# Clients\r\n";
  out += fmt::format("connected_clients:{}\r\n", s.client_count());
  out += fmt::format("maxclients:{}\r\n", c.maxclients);
  out += "blocked_clients:0\r\n";
}

void section_memory(Server& s, std::string& out) {
  MemoryFigures m = memory_figures(s);
  Config c = s.context().config();
  out += "# Memory\r\n";
  out += fmt::format("used_memory:{}\r\n", m.used_bytes);
  out += fmt::format("used_memory_human:{}\r\n", human_bytes(static_cast<double>(m.used_bytes)));
  out += fmt::format("used_memory_rss:{}\r\n", m.rss_bytes);
  out += fmt::format("used_memory_rss_human:{}\r\n", human_bytes(static_cast<double>(m.rss_bytes)));
  out += fmt::format("maxmemory:{}\r\n", m.budget_bytes);
  out += fmt::format("maxmemory_human:{}\r\n", human_bytes(static_cast<double>(m.budget_bytes)));
  out += fmt::format("maxmemory_policy:{}\r\n", name_of(c.eviction_policy));
  out += fmt::format("memory_index_bytes:{}\r\n", m.index_bytes);
  out += fmt::format("memory_leased_bytes:{}\r\n", m.leased_bytes);
  out += fmt::format("memory_objects:{}\r\n", m.objects);
  out += fmt::format("memory_chunks:{}\r\n", m.chunks);
  out += fmt::format("chunk_size:{}\r\n", c.chunk_size);
  out += fmt::format("buffer_pool_idle_bytes:{}\r\n", m.buffer_pool_idle_bytes);
  out += fmt::format("buffer_pool_reused:{}\r\n", m.buffer_pool_reused);
  out += fmt::format("buffer_pool_fresh:{}\r\n", m.buffer_pool_fresh);
}

void section_stats(Server& s, std::string& out) {
  MemoryFigures m = memory_figures(s);
  out += "# Stats\r\n";
  out += fmt::format("total_connections_received:{}\r\n", s.total_connections().value());
  out += fmt::format("total_commands_processed:{}\r\n", s.commands_processed().value());
  out += fmt::format("instantaneous_ops_per_sec:{}\r\n", s.instantaneous_ops());
  out += fmt::format("rejected_connections:{}\r\n", s.rejected_connections().value());
  out += fmt::format("accept_errors:{}\r\n", s.accept_errors().value());
  out += fmt::format("evicted_clients:{}\r\n", s.evicted_clients().value());
  out += fmt::format("expired_keys:{}\r\n", m.expired_objects);
  out += fmt::format("evicted_keys:{}\r\n", m.evicted_objects);
  out += fmt::format("evicted_chunks:{}\r\n", m.evicted_chunks);
  out += fmt::format("keyspace_hits:{}\r\n", m.hits);
  out += fmt::format("keyspace_misses:{}\r\n", m.misses);
}

void section_cpu(std::string& out) {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  out += "# CPU\r\n";
  out += fmt::format("used_cpu_sys:{}.{:06}\r\n", ru.ru_stime.tv_sec, ru.ru_stime.tv_usec);
  out += fmt::format("used_cpu_user:{}.{:06}\r\n", ru.ru_utime.tv_sec, ru.ru_utime.tv_usec);
}

void section_commandstats(Server& s, std::string& out) {
  out += "# Commandstats\r\n";
  const auto& specs = s.context().commands().all();
  const auto& stats = s.command_stats();
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t calls = stats[i].calls->value();
    uint64_t rejected = stats[i].rejected->value();
    if (calls == 0 && rejected == 0) continue;
    HistogramSnapshot h = stats[i].latency->snapshot();
    uint64_t usec = h.sum / 1000;
    out += fmt::format(
        "cmdstat_{}:calls={},usec={},usec_per_call={:.2f},rejected_calls={},"
        "failed_calls={}\r\n",
        specs[i].name, calls, usec, calls ? static_cast<double>(h.sum) / 1000.0 / calls : 0.0,
        rejected, stats[i].failed->value());
  }
}

void section_latencystats(Server& s, std::string& out) {
  out += "# Latencystats\r\n";
  const auto& specs = s.context().commands().all();
  const auto& stats = s.command_stats();
  for (size_t i = 0; i < specs.size(); ++i) {
    HistogramSnapshot h = stats[i].latency->snapshot();
    if (h.count == 0) continue;
    auto us = [&](double q) { return static_cast<double>(h.percentile(q)) / 1000.0; };
    out += fmt::format("latency_percentiles_usec_{}:p50={:.3f},p99={:.3f},p99.9={:.3f}\r\n",
                       specs[i].name, us(0.5), us(0.99), us(0.999));
  }
}

void section_flash(Server& s, std::string& out) {
  Store& store = s.context().store();
  const FlashTierStatus& status = store.flash_status();
  StoreStats st = store.stats();
  const FlashStats& f = st.flash;
  out += "# Flash\r\n";
  out += fmt::format("flash_enabled:{}\r\n", store.has_flash() ? 1 : 0);
  if (!status.error.empty()) out += fmt::format("flash_error:{}\r\n", status.error);
  out += fmt::format("flash_path:{}\r\n", status.path);
  out += fmt::format("flash_io_backend:{}\r\n", status.io_backend);
  out += fmt::format("flash_direct_io:{}\r\n", status.direct_io ? 1 : 0);
  uint64_t free_bytes = f.capacity_bytes > f.used_bytes ? f.capacity_bytes - f.used_bytes : 0;
  out += fmt::format("flash_capacity_bytes:{}\r\n", f.capacity_bytes);
  out += fmt::format("flash_used_bytes:{}\r\n", f.used_bytes);
  out += fmt::format("flash_free_bytes:{}\r\n", free_bytes);
  out += fmt::format("flash_objects:{}\r\n", f.objects);
  out += fmt::format("flash_compact_objects:{}\r\n", f.compact_objects);
  out += fmt::format("flash_chunks:{}\r\n", f.chunks);
  out += fmt::format("flash_regions:{}\r\n", f.regions);
  out += fmt::format("flash_regions_used:{}\r\n", f.regions_used);
  out += fmt::format("flash_index_bytes:{}\r\n", f.index_bytes);
  out += fmt::format("flash_reclaims:{}\r\n", f.reclaims);
  out += fmt::format("flash_reclaim_index_walks:{}\r\n", f.reclaim_index_walks);
  out += fmt::format("flash_reclaim_region_reads:{}\r\n", f.reclaim_region_reads);
  out += fmt::format("flash_regions_draining:{}\r\n", f.regions_draining);
  out += fmt::format("flash_reinsertions:{}\r\n", f.reinsertions);
  out += fmt::format("flash_reinsert_fresh_read_share:{:.4f}\r\n", f.reinsert_fresh_read_share);
  out += fmt::format("flash_reinsert_copies_read_share:{:.4f}\r\n", f.reinsert_copies_read_share);
  out += fmt::format("flash_reinsert_copying:{}\r\n", f.reinsert_copying ? 1 : 0);
  out += fmt::format("flash_reads:{}\r\n", f.reads);
  out += fmt::format("flash_read_bytes:{}\r\n", f.read_bytes);
  out += fmt::format("flash_write_bytes:{}\r\n", f.device_write_bytes);
  out += fmt::format("flash_user_write_bytes:{}\r\n", f.user_write_bytes);
  out += fmt::format("flash_write_amplification:{:.3f}\r\n", f.write_amplification);
  out += fmt::format("flash_checksum_failures:{}\r\n", f.checksum_failures);
  out += fmt::format("flash_key_collisions:{}\r\n", f.key_collisions);
  HistogramSnapshot rl = store.flash_read_latency();
  auto read_us = [&](double q) { return static_cast<double>(rl.percentile(q)) / 1000.0; };
  out += fmt::format("flash_read_latency_usec:p50={:.3f},p99={:.3f},p99.9={:.3f}\r\n", read_us(0.5),
                     read_us(0.99), read_us(0.999));
  out += fmt::format("flash_write_errors:{}\r\n", f.write_errors);
  out += fmt::format("flash_read_errors:{}\r\n", f.read_errors);
  out += fmt::format("promotions_attempted:{}\r\n", st.promotions_attempted);
  out += fmt::format("promotions_done:{}\r\n", st.promotions_done);
  out += fmt::format("promotions_failed:{}\r\n", st.promotions_failed);
  out += fmt::format("offload_queue_bytes:{}\r\n", st.memory.offloading_bytes);
  out += fmt::format("offloads_inflight:{}\r\n", st.memory.offloads_inflight);
  out += fmt::format("offloads:{}\r\n", st.memory.offloads);
  out += fmt::format("offload_busy:{}\r\n", st.memory.offload_busy);
  out += fmt::format("offload_dropped:{}\r\n", st.memory.offload_dropped);
  out += fmt::format("offload_waits:{}\r\n", st.memory.offload_waits);
  // Background writeback: dirty bytes (shared with /metrics through
  // MemoryFigures) and its counters.
  out += fmt::format("dirty_bytes:{}\r\n", memory_figures(s).dirty_bytes);
  out += fmt::format("writeback_inflight_bytes:{}\r\n", st.writeback_inflight_bytes);
  out += fmt::format("writeback_objects:{}\r\n", st.writeback_objects);
  out += fmt::format("writeback_bytes:{}\r\n", st.writeback_bytes);
  out += fmt::format("flash_hits:{}\r\n", st.flash_hits);
  out += fmt::format("flash_read_buffer_used:{}\r\n", st.flash_read_buffer_used);
  out += fmt::format("flash_read_buffer_limit:{}\r\n", st.flash_read_buffer_limit);
  out += fmt::format("flash_read_buffer_waits:{}\r\n", st.flash_read_buffer_waits);
  out += fmt::format("flash_write_buffer_used:{}\r\n", st.flash_write_buffer_used);
  out += fmt::format("flash_write_buffer_limit:{}\r\n", st.flash_write_buffer_limit);
  out += fmt::format("flash_write_buffer_waits:{}\r\n", st.flash_write_buffer_waits);
}

// The registry's metrics of one family prefix, as INFO fields: the same
// values /metrics exports, named without "tierkv_" and "_total", in the
// order they were registered. A gauge kept in smaller units (per_unit > 1)
// prints as a decimal, as in /metrics.
void registry_fields(MetricsRegistry& metrics, std::initializer_list<std::string_view> prefixes,
                     std::string& out) {
  metrics.collect();
  auto wanted = [&](std::string_view name) {
    for (std::string_view p : prefixes)
      if (name.starts_with(p)) return true;
    return false;
  };
  auto field = [](std::string_view name) {
    name.remove_prefix(std::string_view("tierkv_").size());
    if (name.ends_with("_total")) name.remove_suffix(std::string_view("_total").size());
    return name;
  };
  metrics.for_each_counter([&](const std::string& n, const std::string& labels, const Counter& c) {
    if (wanted(n) && labels.empty()) out += fmt::format("{}:{}\r\n", field(n), c.value());
  });
  metrics.for_each_gauge(
      [&](const std::string& n, const std::string& labels, const Gauge& g, int64_t per_unit) {
        if (!wanted(n) || !labels.empty()) return;
        if (per_unit == 1)
          out += fmt::format("{}:{}\r\n", field(n), g.value());
        else
          out += fmt::format("{}:{:.3f}\r\n", field(n),
                             static_cast<double>(g.value()) / static_cast<double>(per_unit));
      });
}

void section_prefetch(Server& s, std::string& out) {
  out += "# Prefetch\r\n";
  registry_fields(s.context().metrics(),
                  {"tierkv_prefetch_", "tierkv_demand_kicks", "tierkv_promotion_bytes_"}, out);
}

void section_preheat(Server& s, std::string& out) {
  out += "# Preheat\r\n";
  registry_fields(s.context().metrics(), {"tierkv_preheat_"}, out);
}

void section_stream(Server& s, std::string& out) {
  out += "# Stream\r\n";
  registry_fields(s.context().metrics(), {"tierkv_stream_"}, out);
}

void section_persistence(Server& s, std::string& out) {
  render_persistence(s.loading_figures(), out);
}

void section_cluster(Server& s, std::string& out) {
  out += "# Cluster\r\n";
  const std::optional<ClusterFigures> c = cluster_figures(s);
  out += fmt::format("cluster_enabled:{}\r\n", c ? 1 : 0);
  if (!c) return;
  auto refusals = [&](cluster::Route::Kind kind) {
    return s.context().cluster_refusals(kind).value();
  };
  out += fmt::format(
      "cluster_state:{}\r\ncluster_slot_map_version:{}\r\ncluster_slots_owned:{}\r\n"
      "cluster_lease_renewals:{}\r\ncluster_registrations:{}\r\ncluster_etcd_round_trips:{}\r\n"
      "cluster_etcd_failures:{}\r\ncluster_keys_purged:{}\r\ncluster_controller:{}\r\n"
      "cluster_controller_maps_written:{}\r\ncluster_moved:{}\r\ncluster_ask:{}\r\n"
      "cluster_crossslot:{}\r\ncluster_tryagain:{}\r\ncluster_down:{}\r\n"
      "cluster_keys_migrated_in:{}\r\ncluster_keys_migrated_out:{}\r\n"
      "cluster_bytes_migrated_out:{}\r\ncluster_keys_migration_dropped:{}\r\n"
      "cluster_slots_migrating_out:{}\r\ncluster_migration_passes:{}\r\n"
      "cluster_migration_retries:{}\r\ncluster_migration_progress:{:.3f}\r\n"
      "cluster_migration_last_pass_ms:{}\r\ncluster_migration_last_pass_bytes:{}\r\n",
      c->up ? "ok" : "fail", c->map_version, c->slots_owned, c->lease_renewals, c->registrations,
      c->etcd_round_trips, c->etcd_failures, c->keys_purged, c->controller,
      c->controller_maps_written, refusals(cluster::Route::Kind::kMoved),
      refusals(cluster::Route::Kind::kAsk), refusals(cluster::Route::Kind::kCrossSlot),
      refusals(cluster::Route::Kind::kTryAgain),
      refusals(cluster::Route::Kind::kDown) + refusals(cluster::Route::Kind::kUnserved),
      s.context().cluster_keys_migrated(true).value(),
      s.context().cluster_keys_migrated(false).value(), c->bytes_migrated_out,
      c->keys_migration_dropped, c->slots_migrating_out, c->migration_passes, c->migration_retries,
      c->migration_progress, c->migration_last_pass_ms, c->migration_last_pass_bytes);
  registry_fields(s.context().metrics(), {"tierkv_cluster_prefetch_hints_"}, out);
}

void section_sizing(Server& s, std::string& out) {
  render_sizing_info(s.context().store().sizing_curves(), out);
}

void section_keyspace(Server& s, std::string& out) {
  out += "# Keyspace\r\n";
  Store& store = s.context().store();
  if (store.loading()) return;  // the key space is not known yet
  uint64_t keys = store.size();
  if (keys > 0) out += fmt::format("db0:keys={},expires=0,avg_ttl=0\r\n", keys);
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

MemoryFigures memory_figures(Server& server) {
  StoreStats st = server.context().store().stats();
  MemoryFigures m;
  m.used_bytes = st.memory.used_bytes;
  m.budget_bytes = st.memory.budget_bytes;
  m.leased_bytes = st.memory.leased_bytes;
  m.dirty_bytes = st.memory.dirty_bytes;
  m.index_bytes = st.memory.index_bytes;
  m.objects = st.memory.objects;
  m.chunks = st.memory.chunks;
  m.evicted_objects = st.memory.evicted_objects;
  m.evicted_chunks = st.memory.evicted_chunks;
  m.expired_objects = st.memory.expired_objects;
  m.buffer_pool_idle_bytes = st.memory.buffer_pool.idle_bytes;
  m.buffer_pool_reused = st.memory.buffer_pool.reused;
  m.buffer_pool_fresh = st.memory.buffer_pool.fresh;
  m.hits = st.hits;
  m.misses = st.misses;
  m.rss_bytes = read_rss_bytes();
  return m;
}

std::string render_info(Server& server, std::string_view section) {
  using Fn = void (*)(Server&, std::string&);
  struct Section {
    std::string_view name;
    Fn fn;
    bool in_default;
  };
  static const Section kSections[] = {
      {"server", section_server, true},
      {"clients", section_clients, true},
      {"memory", section_memory, true},
      {"persistence", section_persistence, true},
      {"stats", section_stats, true},
      {"cpu", [](Server&, std::string& out) { section_cpu(out); }, true},
      {"commandstats", section_commandstats, false},
      {"latencystats", section_latencystats, false},
      {"flash", section_flash, true},
      {"prefetch", section_prefetch, true},
      {"preheat", section_preheat, true},
      {"stream", section_stream, true},
      {"cluster", section_cluster, true},
      {"sizing", section_sizing, true},
      {"keyspace", section_keyspace, true},
  };
  bool all = iequal(section, "all") || iequal(section, "everything");
  bool dflt = section.empty() || iequal(section, "default");
  std::string out;
  for (const Section& s : kSections) {
    if (all || (dflt && s.in_default) || iequal(section, s.name)) {
      if (!out.empty()) out += "\r\n";
      s.fn(server, out);
    }
  }
  return out;
}

std::optional<ClusterFigures> cluster_figures(Server& s) {
  const cluster::Member* member = s.context().cluster();
  if (member == nullptr) return std::nullopt;
  ClusterFigures c;
  const std::shared_ptr<const cluster::SlotMap> map = member->map();
  const std::optional<size_t> self = map ? map->index_of(member->self().id) : std::nullopt;
  const cluster::Member::Stats st = member->stats();
  c.up = member->up();
  c.map_version = map ? map->version() : 0;
  c.slots_owned = self ? map->slots_owned_by(*self) : 0;
  c.lease_renewals = st.renewals;
  c.registrations = st.registrations;
  c.etcd_round_trips = st.etcd_round_trips;
  c.etcd_failures = st.etcd_failures;
  if (const SlotPurger* purger = s.context().slot_purger()) c.keys_purged = purger->keys_purged();
  if (const cluster::Controller* controller = s.context().controller()) {
    c.controller = controller->leading() ? "leading" : "standing";
    c.controller_maps_written = controller->maps_written();
  }
  if (const SlotMigrator* migrator = s.context().slot_migrator()) {
    const SlotMigrator::Stats m = migrator->stats();
    c.bytes_migrated_out = m.bytes_out;
    c.keys_migration_dropped = m.keys_dropped;
    c.slots_migrating_out = m.slots_moving;
    c.migration_passes = m.passes;
    c.migration_retries = m.retries;
    c.migration_progress = m.pass_progress;
    c.migration_last_pass_ms = m.last_pass_ms;
    c.migration_last_pass_bytes = m.last_pass_bytes;
  }
  return c;
}

}  // namespace tierkv::server
