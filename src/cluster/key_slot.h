// Redis Cluster's key space: 16384 hash slots. A key's slot is the CRC16
// (XMODEM) of the key mod 16384, or of its hash tag if it has one: the text
// between the first '{' and the first '}' after it, when that text is not
// empty. Keys that share a tag share a slot ("{chunk}:metadata" and
// "{chunk}:kv_bytes"), which is how clients keep a multi-key command on
// one node.
#pragma once

#include <cstdint>
#include <string_view>

namespace tierkv::cluster {

inline constexpr uint32_t kSlotCount = 16384;

uint16_t crc16(std::string_view bytes);
// The same, a byte at a time: the textbook form crc16() is tested against.
uint16_t crc16_bytewise(std::string_view bytes);
// The part of `key` that decides its slot: its hash tag, or the whole key.
std::string_view hashed_part(std::string_view key);
uint16_t key_slot(std::string_view key);

}  // namespace tierkv::cluster
