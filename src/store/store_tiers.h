// The tiers behind a Store, for tests and benchmarks that measure or stage
// them directly. The server never includes this header (the build checks
// it): it reaches the tiers through Store alone.
#pragma once

#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/store.h"

namespace tierkv {

class StoreTiers {
 public:
  static memory::MemoryTier& memory(Store& store) { return *store.memory_; }
  // Null when the store runs on memory alone, or is still loading.
  static flash::FlashTier* flash(Store& store) {
    return store.loading() ? nullptr : store.flash_.get();
  }
};

}  // namespace tierkv
