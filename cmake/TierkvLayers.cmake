# tierkv_layer(<target> ALLOWED <folders...> [FORBID_HEADERS <regex>]
#              [FORBID_NAMES <regex>])
# Gives <target> (the library of the current src/ folder) the include root,
# and checks before it compiles that the folder's files reach only the
# layers below it (cmake/check_layers.cmake): dependencies point downward.
function(tierkv_layer target)
  cmake_parse_arguments(ARG "" "FORBID_HEADERS;FORBID_NAMES" "ALLOWED" ${ARGN})
  get_filename_component(layer ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc
       ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  set(check ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake)
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/${target}_layers.stamp)
  list(JOIN ARG_ALLOWED "," allowed)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_CURRENT_SOURCE_DIR} -DLAYER=${layer}
            -DALLOWED=${allowed} "-DFORBID_HEADERS=${ARG_FORBID_HEADERS}"
            "-DFORBID_NAMES=${ARG_FORBID_NAMES}" -DSTAMP=${stamp} -P ${check}
    VERBATIM
    DEPENDS ${files} ${check}
    COMMENT "Checking that src/${layer} uses only ${allowed}")
  add_custom_target(${target}_layers DEPENDS ${stamp})
  add_dependencies(${target} ${target}_layers)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src)
endfunction()
