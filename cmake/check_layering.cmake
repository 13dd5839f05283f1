# The include-layering check of one layer, run by the build (one stamp per layer, see
# dark_add_layer in CMakeLists.txt): every `#include "X/..."` in the layer's files must name a
# layer the architecture table lets it depend on (docs/architecture.md, "Layers"). An include of a
# higher layer fails the build with the file, line, header and the allowed layers.
#   cmake -DCONFIG=<build>/layering/<layer>.cmake -P cmake/check_layering.cmake
# CONFIG sets LAYER (the layer's folder), ALLOWED (the folders it may include from: its own and
# those of the layers below it), ALL_LAYERS (the top-level folders holding layers),
# ALL_FOLDERS (every layer's folder), SOURCE_DIR, FILES, STAMP. A layer may sit in a
# subfolder of another (train/dist, train/cli): a file or header belongs to the layer of the
# deepest folder holding it, so train/dist/ may not include train/'s own headers, nor train/
# those of train/cli/, and FILES of a nested layer are checked with that layer's.
cmake_minimum_required(VERSION 3.25)  # IN_LIST and other current policies
if(NOT CONFIG)
  message(FATAL_ERROR "check_layering.cmake: pass -DCONFIG=<build>/layering/<layer>.cmake")
endif()
include(${CONFIG})

# The layer folder `path` (relative to the source root) belongs to: the deepest of ALL_FOLDERS.
function(owning_folder path out)
  set(best "")
  string(LENGTH "${best}" best_length)
  foreach(folder IN LISTS ALL_FOLDERS)
    string(FIND "${path}" "${folder}/" position)
    string(LENGTH "${folder}" length)
    if(position EQUAL 0 AND length GREATER best_length)
      set(best "${folder}")
      set(best_length ${length})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

set(violations 0)
foreach(file IN LISTS FILES)
  if(NOT EXISTS "${file}")
    continue()  # deleted since the last configure; the rebuild's configure drops it
  endif()
  file(RELATIVE_PATH relative "${SOURCE_DIR}" "${file}")
  owning_folder("${relative}" owner)
  if(NOT owner STREQUAL LAYER)
    continue()  # a nested layer's file: its own check reads it
  endif()
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][A-Za-z0-9_]+/")
  if(NOT includes)
    continue()
  endif()
  file(RELATIVE_PATH shown "${SOURCE_DIR}" "${file}")
  set(content "")
  foreach(line IN LISTS includes)
    string(REGEX MATCH "[\"<]([A-Za-z0-9_]+/[^\">]*)" header "${line}")
    set(header "${CMAKE_MATCH_1}")
    string(REGEX MATCH "^[^/]+" target_layer "${header}")
    if(NOT target_layer IN_LIST ALL_LAYERS)
      continue()
    endif()
    owning_folder("${header}" header_owner)
    if(header_owner IN_LIST ALLOWED)
      continue()
    endif()
    if(content STREQUAL "")
      file(READ "${file}" content)
    endif()
    string(FIND "${content}" "${line}" offset)  # line number = newlines before the match + 1
    string(SUBSTRING "${content}" 0 ${offset} before)
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines line_number)
    math(EXPR line_number "${line_number} + 1")
    string(REPLACE ";" "/, " allowed_text "${ALLOWED}")
    message(NOTICE "${shown}:${line_number}: error: #include \"${header}\" reaches up into ${header_owner}/; "
                   "${LAYER}/ may include only: ${allowed_text}/")
    math(EXPR violations "${violations} + 1")
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "darkformer layering check: ${violations} upward #include(s) in ${LAYER}/ "
                      "(a layer includes only itself and the layers below it; docs/architecture.md, Layers)")
endif()
file(TOUCH "${STAMP}")
