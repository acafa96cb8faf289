// tierkv-flash-bench through tierkv::Store: a store whose memory is too
// small to hold anything, filled with put(), so that every read is served
// from flash through Store::read (FlashReadCallbacks).
#pragma once

#include "read_runner.h"
#include "store/store.h"

namespace tierkv::bench {

// Writes spec.objects objects of spec.object_size() bytes with put(), then
// persists what memory still holds, waits for flash, and empties memory:
// afterwards every object is on flash and only there.
Result<FillResult> fill_store(Store& store, const FillSpec& spec);

// Whole-object reads through Store::read, pieces counted as they arrive;
// each object's first 8 bytes are checked.
ReadResult random_store_reads(Store& store, const FillSpec& fill, const ReadSpec& spec);

}  // namespace tierkv::bench
