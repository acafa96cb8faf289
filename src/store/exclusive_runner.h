// ExclusiveRunner: how a store worker runs the step that makes a write
// visible while no command runs (the server's ExecGate::exclusive), so that
// the write lands between two commands, never inside an EXEC or MSET.
#pragma once

#include <absl/functional/function_ref.h>

#include <functional>

#include "core/status.h"

namespace tierkv {

// Runs its argument under the exclusion; empty: nothing to exclude. A
// runner may refuse to run it (the key's slot moved to another node, say):
// it returns why, and the write fails with that status.
using ExclusiveRunner = std::function<Status(absl::FunctionRef<void()>)>;

}  // namespace tierkv
