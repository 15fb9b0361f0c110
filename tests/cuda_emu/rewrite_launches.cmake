# rewrite_launches.cmake — the one source change the CUDA emulation needs:
#   cmake -DIN=worker/tower/tower_cuda.cu -DOUT=build/cuda_emu/tower_cuda_emu.cpp -P rewrite_launches.cmake
# rewrites each kernel launch `name<<<config>>>(` into `EMU_LAUNCH(name, config)(`
# (cuda_runtime.h of tests/cuda_emu); every other byte is kept, and a #line
# directive keeps compiler messages and __FILE__ / __LINE__ on the original file.
# A launch must sit on one line (all of tower_cuda.cu's do); a `<<<` left over
# afterwards is an error, so a launch the pattern misses cannot go unnoticed.
if(NOT IN OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DIN=file.cu -DOUT=file.cpp -P rewrite_launches.cmake")
endif()
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*)[ \t]*<<<([^;\n]*)>>>[ \t]*\\(" "EMU_LAUNCH(\\1, \\2)(" out "${src}")
string(REPLACE "<<<>>>" "" rest "${out}") # "name<<<>>>" in messages is text, not a launch
string(FIND "${rest}" "<<<" left)
if(NOT left EQUAL -1)
  string(SUBSTRING "${rest}" ${left} 80 where)
  message(FATAL_ERROR "rewrite_launches: a kernel launch the rewrite does not handle in ${IN}: ${where}")
endif()
# the #line keeps __FILE__ the .cu's path (the launch checks and CUDA_CHECK name it)
set(out "#line 1 \"${IN}\"\n${out}")
# write only on change, so that a rebuild recompiles only when the .cu changed
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL out)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${out}")
