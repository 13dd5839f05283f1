# Fails when a production program loads the CUDA emulator (tests/cuda_emulator/), which only
# test programs may link: `ldd` lists every shared library a program loads, through the
# darkformer libraries' own dependencies.
#   cmake -DPROGRAMS="<program>;..." -P tests/check_no_emulator.cmake
foreach(program IN LISTS PROGRAMS)
  execute_process(COMMAND ldd ${program} OUTPUT_VARIABLE libraries RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "ldd ${program} failed (${status})")
  endif()
  if(libraries MATCHES "cuda_emulator")
    message(FATAL_ERROR "${program} loads the CUDA emulator, a test instrument:\n${libraries}")
  endif()
  message(STATUS "${program}: no CUDA emulator among its libraries")
endforeach()
