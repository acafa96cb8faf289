// The types of Store's API that the tiers below it define, for code that
// holds them without calling Store: a pinned read of a value (ObjectView),
// a value written as it arrives (ValueSink), a watch on an absent key
// (AbsentWatches::Handle). The server includes these through this header,
// never from memory/ or flash/ (the build checks it).
#pragma once

#include "memory/absent_watches.h"
#include "memory/object_view.h"
#include "memory/value_sink.h"
