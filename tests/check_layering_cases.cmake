# Cases of the build's include-layering check (cmake/check_layering.cmake) on a made-up
# source tree: nested layers (train/dist, train/cli) and the layers around them.
#   cmake -DCHECK=cmake/check_layering.cmake -DWORK=<scratch folder> -P tests/check_layering_cases.cmake
set(folders core nn train/dist train/formats train train/cli)
file(REMOVE_RECURSE "${WORK}")
set(failures 0)

# expect(NAME LAYER "ALLOWED" FILE "INCLUDE" PASS|FAIL): FILE in LAYER includes INCLUDE.
function(expect name layer allowed file include outcome)
  set(root "${WORK}/${name}")
  file(WRITE "${root}/${file}" "#include \"${include}\"\n")
  file(WRITE "${root}/config.cmake" "
set(LAYER \"${layer}\")
set(ALLOWED \"${allowed}\")
set(ALL_LAYERS \"core;nn;train\")
set(ALL_FOLDERS \"${folders}\")
set(SOURCE_DIR \"${root}\")
set(STAMP \"${root}/stamp\")
set(FILES \"${root}/${file}\")
")
  execute_process(COMMAND ${CMAKE_COMMAND} -DCONFIG=${root}/config.cmake -P ${CHECK}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(status EQUAL 0)
    set(got PASS)
  else()
    set(got FAIL)
  endif()
  if(NOT got STREQUAL outcome)
    message(NOTICE "case ${name}: expected ${outcome}, got ${got}:\n${out}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  else()
    message(STATUS "case ${name}: ${got} as expected")
  endif()
endfunction()

set(train_allowed "core;nn;train/dist;train/formats;train")
expect(loop_includes_formats train "${train_allowed}" train/a.cpp train/formats/checkpoint.h PASS)
expect(loop_includes_cli train "${train_allowed}" train/a.cpp train/cli/commands.h FAIL)
expect(dist_includes_loop train/dist "core;train/dist" train/dist/a.cpp train/config.h FAIL)
expect(dist_includes_core train/dist "core;train/dist" train/dist/a.cpp core/tensor.h PASS)
expect(formats_includes_loop train/formats "core;nn;train/formats" train/formats/a.cpp train/config.h FAIL)
expect(cli_includes_loop train/cli "core;nn;train/dist;train/formats;train;train/cli" train/cli/a.cpp train/config.h PASS)
expect(core_includes_nn core "core" core/a.cpp nn/model.h FAIL)
# A nested layer's file inside the parent's folder is checked with its own layer, not the parent's.
expect(cli_file_skipped_by_loop train "${train_allowed}" train/cli/a.cpp train/cli/commands.h PASS)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} layering case(s) wrong")
endif()
