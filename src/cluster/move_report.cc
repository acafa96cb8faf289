#include "cluster/move_report.h"

#include <nlohmann/json.hpp>

#include "cluster/key_slot.h"
#include "cluster/member.h"

namespace tierkv::cluster {

bool MoveReport::moved_to(uint16_t slot, std::string_view target) const {
  for (const MovedSlots& m : moved) {
    if (slot >= m.first && slot <= m.last) return m.target == target;
  }
  return false;
}

void MoveReport::add(uint16_t slot, std::string_view target) {
  if (!moved.empty() && moved.back().target == target && moved.back().last + 1 == slot) {
    moved.back().last = slot;
    return;
  }
  moved.push_back({slot, slot, std::string(target)});
}

std::string MoveReport::to_json() const {
  nlohmann::json ranges = nlohmann::json::array();
  for (const MovedSlots& m : moved) ranges.push_back({m.first, m.last, m.target});
  return nlohmann::json{{"version", version}, {"moved", ranges}}.dump();
}

Result<MoveReport> MoveReport::from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("move report: not JSON");
  try {
    MoveReport r;
    if (!j.at("version").is_number_unsigned())
      return Status::invalid_argument("move report: bad version");
    r.version = j.at("version").get<uint64_t>();
    for (const nlohmann::json& m : j.at("moved")) {
      if (!m.is_array() || m.size() != 3 || !m[0].is_number_unsigned() ||
          !m[1].is_number_unsigned() || !m[2].is_string())
        return Status::invalid_argument("move report: bad range");
      const uint64_t first = m[0].get<uint64_t>(), last = m[1].get<uint64_t>();
      if (first > last || last >= kSlotCount)
        return Status::invalid_argument("move report: slot out of range");
      r.moved.push_back(
          {static_cast<uint16_t>(first), static_cast<uint16_t>(last), m[2].get<std::string>()});
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string("move report: ") + e.what());
  }
}

std::string MoveStall::to_json() const {
  return nlohmann::json{{"version", version}, {"target", target}, {"error", error}}.dump();
}

Result<MoveStall> MoveStall::from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("version") ||
      !j["version"].is_number_unsigned() || !j.contains("target") || !j["target"].is_string() ||
      !j.contains("error") || !j["error"].is_string())
    return Status::invalid_argument("move stall: not the JSON of one");
  return MoveStall{j["version"].get<uint64_t>(), j["target"].get<std::string>(),
                   j["error"].get<std::string>()};
}

std::string stall_key(std::string_view cluster_name, std::string_view node_id) {
  return cluster_prefix(cluster_name) + "stalled/" + std::string(node_id);
}

std::string moved_key(std::string_view cluster_name, std::string_view node_id) {
  return cluster_prefix(cluster_name) + "moved/" + std::string(node_id);
}

}  // namespace tierkv::cluster
