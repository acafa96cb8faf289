#include "cluster/slot_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

namespace tierkv::cluster {
namespace {

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 40) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'); });
}

// A JSON number that is a whole number >= 0: get<uint32_t>() would wrap a
// negative or larger one into range.
uint64_t unsigned_of(const nlohmann::json& v) {
  if (!v.is_number_unsigned())
    throw nlohmann::json::type_error::create(302, "expected a count", &v);
  return v.get<uint64_t>();
}

}  // namespace

size_t SlotMap::upsert_node(const ClusterNode& node) {
  if (std::optional<size_t> i = index_of(node.id)) {
    nodes_[*i] = node;
    return *i;
  }
  nodes_.push_back(node);
  return nodes_.size() - 1;
}

void SlotMap::remove_node(std::string_view id) {
  const std::optional<size_t> gone = index_of(id);
  if (!gone) return;
  auto renumber = [&](size_t& n) {
    if (n == *gone) {
      n = kNoNode;
    } else if (n != kNoNode && n > *gone) {
      --n;
    }
  };
  for (size_t& n : owners_) renumber(n);
  for (size_t& n : moving_to_) renumber(n);
  // A slot moving away from the removed node stops moving too.
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    if (owners_[s] == kNoNode) {
      moving_to_[s] = kNoNode;
      owner_since_[s] = 0;
    }
    if (moving_to_[s] == kNoNode) moving_since_[s] = 0;
  }
  nodes_.erase(nodes_.begin() + static_cast<ptrdiff_t>(*gone));
}

std::optional<size_t> SlotMap::index_of(std::string_view id) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].id == id) return i;
  return std::nullopt;
}

void SlotMap::set_owner(uint16_t slot, size_t node, uint64_t since) {
  owners_[slot] = node;
  owner_since_[slot] = since;
  moving_to_[slot] = kNoNode;
  moving_since_[slot] = 0;
}

void SlotMap::set_moving(uint16_t slot, size_t node, uint64_t since) {
  moving_to_[slot] = node;
  moving_since_[slot] = node == kNoNode ? 0 : since;
}

std::optional<uint64_t> SlotMap::held_since(uint16_t slot, size_t node) const {
  if (node == kNoNode) return std::nullopt;
  if (owners_[slot] == node) return owner_since_[slot];
  if (moving_to_[slot] == node) return moving_since_[slot];
  return std::nullopt;
}

size_t SlotMap::slots_owned_by(size_t node) const {
  return static_cast<size_t>(std::count(owners_.begin(), owners_.end(), node));
}

size_t SlotMap::unowned_slots() const {
  return slots_owned_by(kNoNode);
}

std::vector<SlotRange> SlotMap::ranges() const {
  std::vector<SlotRange> out;
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const size_t node = owners_[s];
    if (node == kNoNode) continue;
    if (!out.empty() && out.back().node == node && out.back().last + 1u == s) {
      out.back().last = static_cast<uint16_t>(s);
    } else {
      out.push_back({static_cast<uint16_t>(s), static_cast<uint16_t>(s), node});
    }
  }
  return out;
}

std::string SlotMap::to_json() const {
  nlohmann::json j;
  j["version"] = version_;
  j["nodes"] = nlohmann::json::array();
  for (const ClusterNode& n : nodes_)
    j["nodes"].push_back({{"id", n.id}, {"host", n.host}, {"port", n.port}, {"weight", n.weight}});
  // Runs of one owner and one "since".
  j["slots"] = nlohmann::json::array();
  uint32_t first = 0;
  for (uint32_t s = 0; s <= kSlotCount; ++s) {
    const bool run_ends =
        s == kSlotCount || owners_[s] != owners_[first] || owner_since_[s] != owner_since_[first];
    if (!run_ends) continue;
    if (owners_[first] != kNoNode)
      j["slots"].push_back({first, s - 1, nodes_[owners_[first]].id, owner_since_[first]});
    first = s;
  }
  j["moving"] = nlohmann::json::array();
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    if (moving_to_[s] != kNoNode)
      j["moving"].push_back(
          {{"slot", s}, {"to", nodes_[moving_to_[s]].id}, {"since", moving_since_[s]}});
  }
  return j.dump();
}

Result<SlotMap> SlotMap::from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::invalid_argument("slot map: not a JSON object");
  SlotMap map;
  try {
    map.version_ = unsigned_of(j.at("version"));
    for (const nlohmann::json& n : j.at("nodes")) {
      const uint64_t port = unsigned_of(n.at("port"));
      ClusterNode node{n.at("id").get<std::string>(), n.at("host").get<std::string>(),
                       static_cast<uint16_t>(port),
                       n.contains("weight") ? unsigned_of(n["weight"]) : 1};
      if (!valid_id(node.id))
        return Status::invalid_argument("slot map: bad node id '" + node.id + "'");
      if (node.host.empty() || port == 0 || port > 65535)
        return Status::invalid_argument("slot map: bad address of node " + node.id);
      if (map.index_of(node.id))
        return Status::invalid_argument("slot map: node " + node.id + " twice");
      map.nodes_.push_back(std::move(node));
    }
    for (const nlohmann::json& r : j.at("slots")) {
      const uint64_t first = unsigned_of(r.at(0));
      const uint64_t last = unsigned_of(r.at(1));
      const std::optional<size_t> node = map.index_of(r.at(2).get<std::string>());
      const uint64_t since = r.size() > 3 ? unsigned_of(r.at(3)) : 0;
      if (first > last || last >= kSlotCount || !node || since > map.version_)
        return Status::invalid_argument("slot map: bad slot range");
      for (uint64_t s = first; s <= last; ++s) {
        if (map.owners_[s] != kNoNode)
          return Status::invalid_argument(fmt::format("slot map: slot {} owned twice", s));
        map.owners_[s] = *node;
        map.owner_since_[s] = since;
      }
    }
    for (const nlohmann::json& m : j.value("moving", nlohmann::json::array())) {
      const uint64_t slot = unsigned_of(m.at("slot"));
      const std::optional<size_t> to = map.index_of(m.at("to").get<std::string>());
      const uint64_t since = m.contains("since") ? unsigned_of(m["since"]) : 0;
      if (slot >= kSlotCount || !to || map.owners_[slot] == kNoNode || map.owners_[slot] == *to ||
          since > map.version_)
        return Status::invalid_argument("slot map: bad moving slot");
      map.moving_to_[slot] = *to;
      map.moving_since_[slot] = since;
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string("slot map: ") + e.what());
  }
  return map;
}

std::vector<size_t> balanced_owners(const SlotMap& map) {
  const size_t n = map.nodes().size();
  std::vector<size_t> owners(kSlotCount, SlotMap::kNoNode);
  uint64_t total_weight = 0;
  for (const ClusterNode& node : map.nodes()) total_weight += node.weight;
  if (total_weight == 0) return owners;
  // Shares by largest remainder: they add up to kSlotCount exactly.
  std::vector<size_t> share(n);
  std::vector<std::pair<uint64_t, size_t>> remainders;
  size_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned __int128 exact =
        static_cast<unsigned __int128>(map.nodes()[i].weight) * kSlotCount;
    share[i] = static_cast<size_t>(exact / total_weight);
    remainders.emplace_back(static_cast<uint64_t>(exact % total_weight), i);
    given += share[i];
  }
  std::sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t k = 0; given < kSlotCount; ++k, ++given) ++share[remainders[k % n].second];
  // Each node keeps its own slots up to its share; the rest are free.
  std::vector<size_t> kept(n, 0);
  std::vector<uint16_t> free;
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const size_t owner = map.owner(static_cast<uint16_t>(s));
    if (owner != SlotMap::kNoNode && kept[owner] < share[owner]) {
      owners[s] = owner;
      ++kept[owner];
    } else {
      free.push_back(static_cast<uint16_t>(s));
    }
  }
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    for (; kept[i] < share[i]; ++kept[i]) owners[free[next++]] = i;
  }
  return owners;
}

}  // namespace tierkv::cluster
