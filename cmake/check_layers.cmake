# Fails if a source file under ROOT includes a header it must not reach:
# src/server goes to the tiers through Store alone, so no memory/ or flash/
# header, and not store/store_tiers.h (the tiers handed out for tests).
# Usage: cmake -DROOT=<folder> [-DSTAMP=<file to touch on success>] -P check_layers.cmake
if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: ROOT is not set")
endif()
file(GLOB_RECURSE files ${ROOT}/*.cc ${ROOT}/*.h)
set(violations "")
foreach(file ${files})
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"(memory|flash)/|store/store_tiers\\.h")
  foreach(line ${lines})
    string(STRIP "${line}" line)
    list(APPEND violations "${file}: ${line}")
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "src/server reaches the tiers only through Store "
                      "(include store/store.h or store/api_types.h):\n  ${text}")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
