// Object's two layouts. Contract: a fused object holds its key, hash, size
// and bytes in the one block its chunk owns; it is never partial and costs
// no metadata of its own; it has no owner until published and none after it
// is detached; the last release credits the chunk's budget through its
// BudgetSlot and frees the block (ASan checks the freeing). A separate
// object holds any key length and chunk count, holes included.
#include "memory/object.h"

#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tierkv::memory {
namespace {

TEST(ObjectTest, AFusedObjectHoldsKeyHashAndBytesInItsChunksBlock) {
  std::atomic<int64_t> used{0};
  BudgetSlot slot(&used);
  const std::string key = "user:0123456789ab";
  const std::string value(100, 'v');
  const auto charge = static_cast<uint32_t>(Object::fused_charge(key.size(), value.size()));
  used += charge;
  Chunk* c =
      Object::create_fused(key, 0xabcdef, static_cast<uint32_t>(value.size()), charge, slot.id());
  Object* obj = Object::of_fused(c);
  std::memcpy(c->data(), value.data(), value.size());

  EXPECT_TRUE(obj->fused());
  EXPECT_EQ(obj->key(), key);
  EXPECT_EQ(obj->hash(), 0xabcdefu);
  EXPECT_EQ(obj->size(), value.size());
  EXPECT_EQ(obj->chunk_count(), 1u);
  EXPECT_EQ(obj->chunk(0), c);
  EXPECT_EQ(obj->resident(), 1u);
  EXPECT_FALSE(obj->partial());
  EXPECT_EQ(obj->charge(), 0);
  EXPECT_EQ(c->index(), 0u);
  EXPECT_EQ(std::string(c->data(), c->size), value);
  // The key and the value do not overlap the header or each other.
  obj->set_version(0x1234'5678'9abc'def0);
  obj->flash_state = FlashState::kClean;
  obj->has_ttl = true;
  EXPECT_EQ(obj->version(), 0x1234'5678'9abc'def0u);
  EXPECT_EQ(obj->key(), key);
  EXPECT_EQ(std::string(c->data(), c->size), value);

  EXPECT_EQ(c->owner(), nullptr) << "unpublished";
  c->set_owner(obj);
  EXPECT_EQ(c->owner(), obj);
  c->detach();
  EXPECT_EQ(c->owner(), nullptr);

  ChunkPin pin(c);
  c->release();  // the index's reference: the pin keeps the block
  EXPECT_EQ(used.load(), charge);
  EXPECT_EQ(pin.bytes(), value);
  pin = ChunkPin();
  EXPECT_EQ(used.load(), 0) << "the last release credits the charge";
}

TEST(ObjectTest, FusedOnlyForOneInlineChunkAndAKeyUnder64KiB) {
  const uint32_t chunk = 1 << 20;
  EXPECT_TRUE(Object::fits_fused(16, 0, chunk));
  EXPECT_TRUE(Object::fits_fused(65535, 100, chunk));
  EXPECT_FALSE(Object::fits_fused(65536, 100, chunk));
  EXPECT_TRUE(Object::fits_fused(16, Chunk::kPooledMin - 1, chunk));
  EXPECT_FALSE(Object::fits_fused(16, Chunk::kPooledMin, chunk)) << "a pooled buffer";
  EXPECT_TRUE(Object::fits_fused(16, 4095, 4096));
  EXPECT_FALSE(Object::fits_fused(16, 4096, 4096)) << "a full chunk";
  // 52 bytes of header: a 16-byte key and a 100-byte value ask glibc for
  // 168 bytes, one 176-byte block.
  EXPECT_EQ(Object::fused_charge(16, 100), heap_block_charge(168));
  EXPECT_EQ(heap_block_charge(168), 176u);
}

// The charge is what glibc's allocator really gives: the usable size of a
// block is its charge less the 8-byte size field.
TEST(ObjectTest, HeapBlockChargeIsGlibcsBlockSize) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's, whose sizes this checks";
#else
  for (size_t n = 1; n < 8192; n += 7) {
    void* p = std::malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(malloc_usable_size(p) + 8, heap_block_charge(n)) << n << " bytes";
    std::free(p);
  }
#endif
}

TEST(ObjectTest, ASeparateObjectHoldsLongKeysManyChunksAndHoles) {
  const std::string key(70'000, 'k');
  Object* obj = Object::create(key, 42, 3 * 4096 - 5, 3);
  EXPECT_FALSE(obj->fused());
  EXPECT_EQ(obj->key(), key);
  EXPECT_EQ(obj->hash(), 42u);
  EXPECT_EQ(obj->size(), 3u * 4096 - 5);
  EXPECT_EQ(obj->chunk_count(), 3u);
  std::atomic<int64_t> used{0};
  BudgetSlot slot(&used);
  Chunk* a = Chunk::allocate(4096, 1, slot.id());
  Chunk* b = Chunk::allocate(4091, 1, slot.id());
  used += 2;
  obj->set_chunk(0, a);
  obj->set_chunk(2, b);
  obj->set_resident(2);
  EXPECT_TRUE(obj->partial());
  size_t seen = 0, holes = 0;
  for (Chunk* c : obj->chunks()) (c ? seen : holes)++;
  EXPECT_EQ(seen, 2u);
  EXPECT_EQ(holes, 1u);
  EXPECT_EQ(obj->chunk(2), b);
  a->set_owner(obj);
  EXPECT_EQ(a->owner(), obj);
  a->detach();
  EXPECT_EQ(a->owner(), nullptr);
  EXPECT_GT(obj->charge(), static_cast<int64_t>(key.size()));
  a->release();
  b->release();
  EXPECT_EQ(used.load(), 0);
  Object::destroy(obj);
}

TEST(ObjectTest, BudgetSlotsAreReusedAndDistinct) {
  std::atomic<int64_t> x{0}, y{0};
  uint8_t first;
  {
    BudgetSlot a(&x);
    BudgetSlot b(&y);
    EXPECT_NE(a.id(), 0);
    EXPECT_NE(a.id(), b.id());
    EXPECT_EQ(BudgetSlot::counter(a.id()), &x);
    EXPECT_EQ(BudgetSlot::counter(b.id()), &y);
    first = a.id();
  }
  EXPECT_EQ(BudgetSlot::counter(first), nullptr);
  BudgetSlot again(&y);
  EXPECT_EQ(BudgetSlot::counter(again.id()), &y);
  EXPECT_EQ(BudgetSlot::counter(0), nullptr);
}

}  // namespace
}  // namespace tierkv::memory
