# x86 micro-kernels (included from src/CMakeLists.txt when FLASHCORE_X86 is ON).
# Flags are per file: only these TUs may contain AVX-512 code; dispatch decides at run
# time whether any of it is called.
set(_fc_x86_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma)
set(_fc_x86_avx512fp16 ${_fc_x86_avx512} -mavx512fp16)
set(_fc_x86_dir ${CMAKE_CURRENT_SOURCE_DIR}/cpu/x86)
target_sources(flashcore_obj PRIVATE
  ${_fc_x86_dir}/gemm_f32_avx512.cpp
  ${_fc_x86_dir}/vecops_avx512.cpp
  ${_fc_x86_dir}/gemm_f16_avx512fp16.cpp
)
set_source_files_properties(
  ${_fc_x86_dir}/gemm_f32_avx512.cpp
  ${_fc_x86_dir}/vecops_avx512.cpp
  PROPERTIES COMPILE_OPTIONS "${_fc_x86_avx512}")
set_source_files_properties(${_fc_x86_dir}/gemm_f16_avx512fp16.cpp
  PROPERTIES COMPILE_OPTIONS "${_fc_x86_avx512fp16}")
target_compile_definitions(flashcore_config INTERFACE FC_BUILD_X86)
