# x86 micro-kernels (included from src/CMakeLists.txt when FLASHCORE_X86 is ON).
# Flags are per file: only these TUs may contain AVX-512 code; dispatch decides at run
# time whether any of it is called.
# -Wno-maybe-uninitialized: GCC 12's AVX-512 headers build unmasked results from
# _mm512_undefined_ps() (`__m512 __Y = __Y;`), which -Wall reports inside the header.
set(_fc_x86_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -Wno-maybe-uninitialized)
set(_fc_x86_avx512fp16 ${_fc_x86_avx512} -mavx512fp16)
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

# AVX512-FP16 kernels need a compiler that knows the ISA (GCC >= 12, Clang >= 14); the
# list entries are guarded by FC_BUILD_AVX512FP16 so an older compiler still builds.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-mavx512fp16 FC_CXX_HAS_MAVX512FP16)
if(FC_CXX_HAS_MAVX512FP16)
  target_sources(flashcore_obj PRIVATE ${_fc_x86_dir}/gemm_f16_avx512fp16.cpp)
  set_source_files_properties(${_fc_x86_dir}/gemm_f16_avx512fp16.cpp
    PROPERTIES COMPILE_OPTIONS "${_fc_x86_avx512fp16}")
  target_compile_definitions(flashcore_config INTERFACE FC_BUILD_AVX512FP16)
endif()

# bf16 kernels (issue 3): AVX512-BF16 (vdpbf16ps) and AMX (tdpbf16ps), each in its own TU
# with its own flags, each guarded like FP16 (FC_BUILD_AVX512BF16 / FC_BUILD_AMX on the list
# entries) so a compiler without the flags still builds the rest. GCC >= 10 / Clang >= 9
# know -mavx512bf16; GCC >= 11 / Clang >= 11 know -mamx-tile -mamx-bf16.
set(_fc_x86_avx512bf16 ${_fc_x86_avx512} -mavx512bf16)
check_cxx_compiler_flag(-mavx512bf16 FC_CXX_HAS_MAVX512BF16)
if(FC_CXX_HAS_MAVX512BF16)
  target_sources(flashcore_obj PRIVATE ${_fc_x86_dir}/gemm_bf16_avx512bf16.cpp
    ${_fc_x86_dir}/vecops_avx512bf16.cpp)
  set_source_files_properties(${_fc_x86_dir}/gemm_bf16_avx512bf16.cpp
    ${_fc_x86_dir}/vecops_avx512bf16.cpp PROPERTIES COMPILE_OPTIONS "${_fc_x86_avx512bf16}")
  target_compile_definitions(flashcore_config INTERFACE FC_BUILD_AVX512BF16)
endif()
# The AMX TU has no vector code of its own; -mavx512f only so <immintrin.h>'s AMX headers
# sit beside the same baseline as the other x86 TUs.
set(_fc_x86_amx ${_fc_x86_avx512} -mamx-tile -mamx-bf16)
check_cxx_compiler_flag("-mamx-tile -mamx-bf16" FC_CXX_HAS_MAMX)
if(FC_CXX_HAS_MAMX)
  target_sources(flashcore_obj PRIVATE ${_fc_x86_dir}/gemm_bf16_amx.cpp)
  set_source_files_properties(${_fc_x86_dir}/gemm_bf16_amx.cpp
    PROPERTIES COMPILE_OPTIONS "${_fc_x86_amx}")
  target_compile_definitions(flashcore_config INTERFACE FC_BUILD_AMX)
endif()
