// tierkv's own version, and the Redis version whose behaviour it follows:
// the redis-server that tests/integration compare it with (Debian 12's,
// installed by scripts/install-deps.sh). HELLO and INFO's redis_version
// report the latter, so that clients keying features on the version behave;
// INFO's tierkv_version and `tierkv-server --version` report ours.
#pragma once

#include <string_view>

namespace tierkv {

inline constexpr std::string_view kTierkvVersion = "0.1.0";
inline constexpr std::string_view kRedisCompatVersion = "7.0.15";

}  // namespace tierkv
