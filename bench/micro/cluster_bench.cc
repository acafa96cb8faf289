// Cluster costs that grow with the node count, for docs/cluster.md's
// scaling estimate: the slot map after nodes join one by one (its JSON is
// what etcd stores and every node's watch receives), parsing it (each node,
// each map version), the controller's next_map(), and route() per command.
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "cluster/controller.h"
#include "cluster/router.h"

namespace tierkv::cluster {
namespace {

std::vector<ClusterNode> nodes(int n) {
  std::vector<ClusterNode> out;
  for (int i = 0; i < n; ++i)
    out.push_back({"n" + std::to_string(1000 + i), "10.0.0." + std::to_string(i), 6380, 1});
  return out;
}

// Every move of `map` reported done, so the next map flips them.
std::map<std::string, MoveReport> all_moved(const SlotMap& map) {
  std::map<std::string, MoveReport> reports;
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    if (map.moving_to(slot) == SlotMap::kNoNode) continue;
    MoveReport& r = reports[map.nodes()[map.owner(slot)].id];
    r.version = map.version();
    r.add(slot, map.nodes()[map.moving_to(slot)].id);
  }
  return reports;
}

// The map of `n` nodes that joined one at a time, each join moved and flipped.
SlotMap grown_map(int n) {
  const std::vector<ClusterNode> all = nodes(n);
  SlotMap map = next_map(nullptr, {all[0]});
  for (int i = 2; i <= n; ++i) {
    const std::vector<ClusterNode> live(all.begin(), all.begin() + i);
    map = next_map(&map, live);
    map = next_map(&map, live, all_moved(map));
  }
  return map;
}

void BM_SlotMapParse(benchmark::State& state) {
  const SlotMap map = grown_map(static_cast<int>(state.range(0)));
  const std::string json = map.to_json();
  for (auto _ : state) benchmark::DoNotOptimize(SlotMap::from_json(json));
  state.counters["json_bytes"] = static_cast<double>(json.size());
  state.counters["ranges"] = static_cast<double>(map.ranges().size());
}

void BM_NextMapJoin(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const SlotMap before = grown_map(n - 1);
  const std::vector<ClusterNode> live = nodes(n);
  for (auto _ : state) benchmark::DoNotOptimize(next_map(&before, live));
  const SlotMap moving = next_map(&before, live);
  state.counters["moving_json_bytes"] = static_cast<double>(moving.to_json().size());
}

void BM_Route(benchmark::State& state) {
  const SlotMap map = grown_map(static_cast<int>(state.range(0)));
  const std::string key = "{chunk:0123456789abcdef}:kv_bytes";
  std::vector<std::string_view> keys{key};
  RouteQuery query;
  query.keys = keys;
  for (auto _ : state) benchmark::DoNotOptimize(route(map, 0, query));
}

BENCHMARK(BM_SlotMapParse)->Arg(3)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NextMapJoin)->Arg(3)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Route)->Arg(3)->Arg(64);

}  // namespace
}  // namespace tierkv::cluster
