// Shared by the key table (config_keys.cc) and the cross-key rules
// (config_rules.cc); not part of the configuration's interface.
#pragma once

#include "core/config.h"
#include "core/status.h"

namespace tierkv {

// Every enumeration holds one of its named choices (an embedded caller may
// have cast any number into one).
Status check_enum_choices(const Config& c);

}  // namespace tierkv
