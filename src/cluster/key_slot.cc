#include "cluster/key_slot.h"

#include <array>

namespace tierkv::cluster {
namespace {

using Table = std::array<uint16_t, 256>;

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
// kTables[0] advances the CRC by one byte; kTables[k] by that byte followed
// by k zero bytes, so that four bytes fold in with four independent
// lookups (slicing by 4) instead of a chain of four.
constexpr std::array<Table, 4> make_tables() {
  std::array<Table, 4> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    t[0][i] = static_cast<uint16_t>(crc);
  }
  for (size_t k = 1; k < 4; ++k) {
    for (uint32_t i = 0; i < 256; ++i) {
      const uint16_t prev = t[k - 1][i];
      t[k][i] = static_cast<uint16_t>((prev << 8) ^ t[0][prev >> 8]);
    }
  }
  return t;
}

constexpr std::array<Table, 4> kTables = make_tables();

}  // namespace

uint16_t crc16_bytewise(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char b : bytes)
    crc = static_cast<uint16_t>((crc << 8) ^ kTables[0][(crc >> 8) ^ b]);
  return crc;
}

uint16_t crc16(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  uint16_t crc = 0;
  for (; n >= 4; n -= 4, p += 4) {
    crc = static_cast<uint16_t>(kTables[3][(crc >> 8) ^ p[0]] ^ kTables[2][(crc & 0xff) ^ p[1]] ^
                                kTables[1][p[2]] ^ kTables[0][p[3]]);
  }
  for (; n > 0; --n, ++p) crc = static_cast<uint16_t>((crc << 8) ^ kTables[0][(crc >> 8) ^ *p]);
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
