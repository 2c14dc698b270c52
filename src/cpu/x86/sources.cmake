# x86 micro-kernels (included from src/CMakeLists.txt when FLASHCORE_X86 is ON).
# Flags are per file: only these TUs may contain AVX-512 code; dispatch decides at run
# time whether any of it is called.
# -Wno-maybe-uninitialized, -Wno-uninitialized: GCC 12's AVX-512 headers build unmasked
# results from _mm512_undefined_ps() (`__m512 __Y = __Y;`), which -Wall reports inside the
# header (as "may be" or, once inlined, as "is used uninitialized"). The first is GCC's only:
# clang, the fuzz build's compiler, warns of an unknown option. (A plain list, no generator
# expression: fc_isa_sources hands these flags to check_cxx_compiler_flag too.)
set(_fc_x86_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -Wno-uninitialized)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND _fc_x86_avx512 -Wno-maybe-uninitialized)
endif()
set(_fc_x86_dir ${CMAKE_CURRENT_SOURCE_DIR}/cpu/x86)
target_sources(flashcore_obj PRIVATE
  ${_fc_x86_dir}/gemm_f32_avx512.cpp
  ${_fc_x86_dir}/vecops_avx512.cpp
  ${_fc_x86_dir}/rowops_avx512.cpp
)
set_source_files_properties(
  ${_fc_x86_dir}/gemm_f32_avx512.cpp
  ${_fc_x86_dir}/vecops_avx512.cpp
  ${_fc_x86_dir}/rowops_avx512.cpp
  PROPERTIES COMPILE_OPTIONS "${_fc_x86_avx512}")
target_compile_definitions(flashcore_config INTERFACE FC_BUILD_X86)
# AVX2 + FMA + F16C (every x86-64 compiler takes these flags; every AVX2 CPU has F16C, and
# dispatch asks for all three): the 8-wide kernel for CPUs without AVX-512.
set(_fc_x86_avx2_sources ${_fc_x86_dir}/gemm_f32_avx2.cpp ${_fc_x86_dir}/vecops_avx2.cpp
    ${_fc_x86_dir}/rowops_avx2.cpp)
target_sources(flashcore_obj PRIVATE ${_fc_x86_avx2_sources})
set_source_files_properties(${_fc_x86_avx2_sources} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")

# The extensions newer compilers know: each TU with its own flags, its list entries guarded
# by the define (FC_BUILD_AVX512FP16 / FC_BUILD_AVX512BF16 / FC_BUILD_AMX), so a compiler
# without a flag still builds the rest (-mavx512fp16: GCC >= 12, Clang >= 14;
# -mavx512bf16: GCC >= 10, Clang >= 9; -mamx-tile -mamx-bf16: GCC >= 11, Clang >= 11).
# The AMX TU's only vector code is the column max of its panel form (AVX-512F, which every
# AMX CPU has); -mavx512f etc. also keep it on the same baseline as the other x86 TUs.
include(${PROJECT_SOURCE_DIR}/cmake/IsaSources.cmake)
fc_isa_sources(flashcore_obj flashcore_config INTERFACE FC_BUILD_AVX512FP16
  FLAGS ${_fc_x86_avx512} -mavx512fp16 SOURCES ${_fc_x86_dir}/gemm_f16_avx512fp16.cpp)
fc_isa_sources(flashcore_obj flashcore_config INTERFACE FC_BUILD_AVX512BF16
  FLAGS ${_fc_x86_avx512} -mavx512bf16
  SOURCES ${_fc_x86_dir}/gemm_bf16_avx512bf16.cpp ${_fc_x86_dir}/vecops_avx512bf16.cpp)
fc_isa_sources(flashcore_obj flashcore_config INTERFACE FC_BUILD_AMX
  FLAGS ${_fc_x86_avx512} -mamx-tile -mamx-bf16 SOURCES ${_fc_x86_dir}/gemm_bf16_amx.cpp)
