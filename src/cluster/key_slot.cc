#include "cluster/key_slot.h"

#include <array>

namespace tierkv::cluster {
namespace {

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
constexpr std::array<uint16_t, 256> make_table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<uint16_t>(crc);
  }
  return table;
}

constexpr std::array<uint16_t, 256> kTable = make_table();

}  // namespace

uint16_t crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char b : bytes) crc = static_cast<uint16_t>((crc << 8) ^ kTable[(crc >> 8) ^ b]);
  return crc;
}

std::string_view hashed_part(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

uint16_t key_slot(std::string_view key) {
  return static_cast<uint16_t>(crc16(hashed_part(key)) & (kSlotCount - 1));
}

}  // namespace tierkv::cluster
