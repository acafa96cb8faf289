// Not compiled: the fixture of the layer_check_* tests. A server file that
// includes a flash header must fail cmake/check_layers.cmake.
#include "flash/flash_tier.h"
