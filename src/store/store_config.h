// How a Config becomes the options of the store's parts (at open), and the
// store's half of CONFIG SET (Store::apply_config). Internal to the store.
#pragma once

#include "core/config.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/prefetch/prefetcher.h"
#include "store/preheat/preheater.h"
#include "store/sizing/miss_ratio_curves.h"

namespace tierkv {

memory::MemoryTierOptions memory_options(const Config& c);
flash::FlashOptions flash_options(const Config& c);
PrefetchOptions prefetch_options(const Config& c);
PreheatLimits preheat_limits(const Config& c);
SizingOptions sizing_options(const Config& c);

}  // namespace tierkv
