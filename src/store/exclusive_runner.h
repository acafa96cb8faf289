// ExclusiveRunner: how a store worker runs the step that makes a write
// visible while no command runs (the server's ExecGate::exclusive), so that
// the write lands between two commands, never inside an EXEC or MSET.
#pragma once

#include <absl/functional/function_ref.h>

#include <functional>

namespace tierkv {

// Runs its argument under the exclusion; empty: nothing to exclude.
using ExclusiveRunner = std::function<void(absl::FunctionRef<void()>)>;

}  // namespace tierkv
