# dark_source_batches(OUT_VAR FOLDER PREFIX EXTENSION SOURCES...): the CUDA backend's kernel
# files in batches, for the unity build (DARK_UNITY_BUILD). A batch is a generated file in
# FOLDER, named PREFIX_N.EXTENSION, that #includes up to 8 of SOURCES, so the compiler's fixed
# cost per call (for nvcc about 8 s: the standard headers and cuda_runtime.h through its four
# passes, more than many kernel files' own code) is paid once per batch. The attention kernel
# files (minutes of device code each) are not batched: they stay one per call, so that they
# compile in parallel. OUT_VAR gets the batches and the files left alone. CMake's own
# UNITY_BUILD does the same for .cpp files but, before CMake 3.31, not for .cu ones.
function(dark_source_batches out_var folder prefix extension)
  set(alone ${ARGN})
  list(FILTER alone INCLUDE REGEX "attention[^/]*$")
  set(batched ${ARGN})
  list(FILTER batched EXCLUDE REGEX "attention[^/]*$")
  set(result ${alone})
  set(batch_size 8)
  list(LENGTH batched count)
  set(index 0)
  set(start 0)
  while(start LESS count)
    math(EXPR stop "${start} + ${batch_size} - 1")
    if(stop GREATER_EQUAL count)
      math(EXPR stop "${count} - 1")
    endif()
    set(content "// Generated (cmake/source_batches.cmake): these files compile as one unit.\n")
    foreach(i RANGE ${start} ${stop})
      list(GET batched ${i} source)
      string(APPEND content "#include \"${source}\"\n")
    endforeach()
    set(batch ${folder}/${prefix}_${index}.${extension})
    file(CONFIGURE OUTPUT ${batch} CONTENT "${content}")
    list(APPEND result ${batch})
    math(EXPR start "${stop} + 1")
    math(EXPR index "${index} + 1")
  endwhile()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()
