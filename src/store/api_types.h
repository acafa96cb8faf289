// The types of Store's API that the tiers below it define, for code that
// holds them without calling Store: a pinned read of a value (ObjectView),
// a value written as it arrives (ValueSink), a watch on an absent key
// (AbsentWatch). The server includes these through this header, never from
// memory/ or flash/, and names them as Store's (tierkv::ObjectView, not
// memory::ObjectView): the build checks both.
#pragma once

#include "memory/absent_watches.h"
#include "memory/object_view.h"
#include "memory/value_sink.h"

namespace tierkv {

using memory::ObjectView;
using memory::ValueSink;
using AbsentWatch = memory::AbsentWatches::Handle;

}  // namespace tierkv
