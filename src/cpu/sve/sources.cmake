# Arm SVE backend (included by src/CMakeLists.txt when FLASHCORE_SVE). Only these files get
# SVE code generation; nothing sets -msve-vector-bits (the kernels are vector-length
# agnostic and must stay correct at every length). -mtune=a64fx only reorders instructions
# for the tuning target (A64FX); it does not change what the code runs on.
set(_fc_sve_flags -march=armv8.2-a+sve -mtune=a64fx)
set(_fc_sve_fp16_flags -march=armv8.2-a+sve+fp16 -mtune=a64fx)
target_sources(flashcore_obj PRIVATE
  cpu/sve/gemm_sve.cpp
  cpu/sve/gemm_f16_sve.cpp
  cpu/sve/vecops_sve.cpp)
set_source_files_properties(cpu/sve/gemm_sve.cpp cpu/sve/vecops_sve.cpp
  PROPERTIES COMPILE_OPTIONS "${_fc_sve_flags}")
set_source_files_properties(cpu/sve/gemm_f16_sve.cpp
  PROPERTIES COMPILE_OPTIONS "${_fc_sve_fp16_flags}")
target_compile_definitions(flashcore_config INTERFACE FC_BUILD_SVE)
