#include "cli/trace/anchors.h"

#include <cmath>

namespace tierkv::trace {
namespace {

// Copied from the "Anchor numbers" table of the traces README.
constexpr Anchor kAnchors[] = {
    {"cloudPhysicsIO", 113'872, 48'974, 0.01, 490, 0.8379, 0.7926, 0.7925},
    {"cloudPhysicsIO", 113'872, 48'974, 0.10, 4'897, 0.8049, 0.6290, 0.6289},
    {"OLTP", 914'145, 186'880, 0.01, 1'869, 0.5836, 0.4024, 0.4023},
    {"OLTP", 914'145, 186'880, 0.10, 18'688, 0.3348, 0.2379, 0.2379},
    {"orm-busy", 5'000'000, 76'349, 0.01, 763, 0.2297, 0.1718, 0.1717},
    {"orm-busy", 5'000'000, 76'349, 0.10, 7'635, 0.1199, 0.0669, 0.0669},
    {"multi2", 26'311, 5'684, 0.01, 57, 0.9648, 0.7205, 0.7181},
    {"multi2", 26'311, 5'684, 0.10, 568, 0.6308, 0.4510, 0.4509},
};

}  // namespace

std::span<const Anchor> readme_anchors() {
  return kAnchors;
}

const Anchor* find_anchor(std::string_view trace, double fraction) {
  for (const Anchor& a : kAnchors) {
    if (a.trace == trace && std::abs(a.fraction - fraction) < 1e-9) return &a;
  }
  return nullptr;
}

size_t anchor_order(std::string_view trace) {
  for (size_t i = 0; i < std::size(kAnchors); ++i) {
    if (kAnchors[i].trace == trace) return i;
  }
  return std::size(kAnchors);
}

}  // namespace tierkv::trace
