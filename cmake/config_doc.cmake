# docs/config.md's table of config keys is what `darkformer config-keys` prints (the schema in
# train/config.cpp): CTest's docs_config_reference fails when the two differ, and the same
# script with -DWRITE=1 rewrites the table in place.
#   cmake -DEXE=build/darkformer -DDOC=docs/config.md [-DWRITE=1] -P cmake/config_doc.cmake
execute_process(COMMAND "${EXE}" config-keys OUTPUT_VARIABLE generated RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "config_doc: `${EXE} config-keys` failed (${status})")
endif()
string(STRIP "${generated}" generated)
file(READ "${DOC}" doc)
string(FIND "${doc}" "| key | type | default | allowed | description |" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "config_doc: ${DOC} has no table of config keys (its header row \"| key | type | ...\")")
endif()
string(SUBSTRING "${doc}" ${begin} -1 rest)
string(FIND "${rest}" "\n\n" length)
set(tail "")
if(length EQUAL -1)  # the table ends the file
  string(LENGTH "${rest}" length)
  set(tail "\n")
endif()
string(SUBSTRING "${rest}" 0 ${length} committed)
string(STRIP "${committed}" committed)
if(committed STREQUAL generated)
  message(STATUS "config_doc: ${DOC} matches `darkformer config-keys`")
elseif(WRITE)
  string(SUBSTRING "${doc}" 0 ${begin} before)
  string(SUBSTRING "${rest}" ${length} -1 after)
  file(WRITE "${DOC}" "${before}${generated}${tail}${after}")
  message(STATUS "config_doc: rewrote the table in ${DOC}")
else()
  message(FATAL_ERROR "config_doc: the table in ${DOC} differs from what `${EXE} config-keys` prints (a config key "
                      "changed): regenerate it with cmake -DEXE=${EXE} -DDOC=${DOC} -DWRITE=1 -P cmake/config_doc.cmake")
endif()
