# CUDA backend (included from src/CMakeLists.txt when FLASHCORE_WITH_CUDA).
#
# instances.inc is the one list of kernels (a direction per row: fwd, bwd, kvc); every row
# (minus the axes switched off below) becomes its own small .cu in the build tree, so the
# instances compile in parallel, and each direction's registry is built from its filtered
# rows (instances_<dir>.inc; registry.cpp reads the forward and KV-cache ones).
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# sm_80 SASS runs on every 8.x GPU (Ampere, Ada), as FlashAttention-2 ships it; 86 and 89 add
# their own SASS. Each extra target costs every sm80-family unit another device compile (on a
# 2-core machine the four-target build took CI's release stage to 1150 s, 2026-12-01).
set(FLASHCORE_CUDA_ARCHS "80;90" CACHE STRING
    "SASS targets of the CUDA kernels (PTX of the last one is embedded too); e.g. 90 for a quick Hopper-only build")
# Every dtype and head dim the instance tables know: the default builds them all, and an
# entry outside them stops the configure (rather than being dropped).
set(_fc_all_DTYPES f16 bf16 tf32 e4m3)
set(_fc_all_HDIMS 64 96 128 192 256)
set(FLASHCORE_CUDA_DTYPES "${_fc_all_DTYPES}" CACHE STRING
    "Tensor-core instances to build: f16, bf16, tf32 (fp32 storage; the exact FFMA kernel is always built), e4m3 (sm90 only)")
set(FLASHCORE_CUDA_HDIMS "${_fc_all_HDIMS}" CACHE STRING "Head-dim instances to build (64, 96, 128, 192 (sm90 only), 256)")

foreach(_fc_name IN ITEMS DTYPES HDIMS)
  foreach(_fc_v IN LISTS FLASHCORE_CUDA_${_fc_name})
    if(NOT _fc_v IN_LIST _fc_all_${_fc_name})
      message(FATAL_ERROR "FLASHCORE_CUDA_${_fc_name}: '${_fc_v}' is not one of: ${_fc_all_${_fc_name}}")
    endif()
  endforeach()
endforeach()

set(_fc_cuda_archs "")
list(LENGTH FLASHCORE_CUDA_ARCHS _fc_narch)
set(_fc_i 0)
foreach(a IN LISTS FLASHCORE_CUDA_ARCHS)
  math(EXPR _fc_i "${_fc_i} + 1")
  if(_fc_i EQUAL _fc_narch)
    list(APPEND _fc_cuda_archs "${a}-real" "${a}-virtual")
  else()
    list(APPEND _fc_cuda_archs "${a}-real")
  endif()
endforeach()

# Writes a generated file only when its text changes (or it is missing), so a re-configure
# does not rebuild every instance.
function(_fc_write_if_changed path text)
  set(old "")
  if(EXISTS ${path})
    file(READ ${path} old)
  endif()
  if(NOT EXISTS ${path} OR NOT old STREQUAL text)
    file(WRITE ${path} "${text}")
  endif()
endfunction()

set(_fc_inst_dir ${CMAKE_CURRENT_BINARY_DIR}/cuda_inst)
file(MAKE_DIRECTORY ${_fc_inst_dir})
include(${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.cmake)
# One family's enabled rows of one direction (instances.cmake) -> one generated .cu per
# row, calling launch_<dir>_<family><type, head dim, tile fields...> of
# kernels/<dir>_<family>.cuh, appended to the list <out_var>, and its registry line
# appended to _fc_enabled_<dir> (the registry of that direction reads them). The sm80
# forward rows have a second unit, <key>_variants.cu, with the score variants' kernel.
function(_fc_instances family dir out_var)
  string(TOLOWER ${family} fam)
  fc_cuda_instance_rows(${family} ${dir} "${FLASHCORE_CUDA_DTYPES}" "${FLASHCORE_CUDA_HDIMS}" _fc_rows)
  set(sources ${${out_var}})
  set(enabled "${_fc_enabled_${dir}}")
  list(LENGTH _fc_rows_KEYS n)
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      list(GET _fc_rows_KEYS ${i} key)
      list(GET _fc_rows_REGS ${i} reg)
      list(GET _fc_rows_TMPLS ${i} tmpl_args)
      string(APPEND enabled "${reg}\n")
      set(src ${_fc_inst_dir}/${key}.cu)
      set(head "// Generated from src/cuda/instances.inc by src/cuda/sources.cmake; do not edit.\n#include \"cuda/kernels/${dir}_${fam}.cuh\"\n\nnamespace flashcore::cuda {\n")
      set(sig "(const ${_fc_params_${dir}}& p, cudaStream_t stream)")
      if(fam STREQUAL "sm80" AND dir STREQUAL "fwd")
        # The score variants' kernel of the row (FwdParams::variants) in a second unit,
        # <key>_variants.cu: the plain kernel's unit holds that kernel alone, as before.
        set(txt "${head}cudaError_t ${key}_variants${sig};\ncudaError_t ${key}${sig} {\n  if (p.variants) return ${key}_variants(p, stream);\n  return launch_${dir}_${fam}<${tmpl_args}>(p, stream);\n}\n}  // namespace flashcore::cuda\n")
        set(vsrc ${_fc_inst_dir}/${key}_variants.cu)
        _fc_write_if_changed(${vsrc} "${head}cudaError_t ${key}_variants${sig} {\n  return launch_${dir}_${fam}<${tmpl_args}, true>(p, stream);\n}\n}  // namespace flashcore::cuda\n")
        list(APPEND sources ${vsrc})
      else()
        set(txt "${head}cudaError_t ${key}${sig} {\n  return launch_${dir}_${fam}<${tmpl_args}>(p, stream);\n}\n}  // namespace flashcore::cuda\n")
      endif()
      _fc_write_if_changed(${src} "${txt}")
      list(APPEND sources ${src})
    endforeach()
  endif()
  set(${out_var} ${sources} PARENT_SCOPE)
  set(_fc_enabled_${dir} "${enabled}" PARENT_SCOPE)
endfunction()

# The launchers' parameters per direction (kernels/params.hpp, kernels/bwd_params.hpp).
set(_fc_params_fwd FwdParams)
set(_fc_params_bwd BwdParams)
set(_fc_params_kvc FwdParams)
set(_fc_inst_sources ${CMAKE_CURRENT_SOURCE_DIR}/cuda/inst_simt_f32.cu
                     ${CMAKE_CURRENT_SOURCE_DIR}/cuda/inst_simt_f32_variants.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/vt_fp8.cu
                     ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kv_combine.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/bwd_aux.cu
                     ${CMAKE_CURRENT_SOURCE_DIR}/cuda/merge_states.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/head_pad.cu
                     ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kv_append.cu)
set(_fc_sm90_sources "")
foreach(dir IN LISTS FC_CUDA_DIRECTIONS)
  set(_fc_enabled_${dir} "")
  _fc_instances(SM80 ${dir} _fc_inst_sources)
  # Hopper rows: sm_90a only, so they are built only when 90 is among the SASS targets, in
  # their own object library (no other arch is compiled for them).
  if("90" IN_LIST FLASHCORE_CUDA_ARCHS)
    _fc_instances(SM90 ${dir} _fc_sm90_sources)
  endif()
  _fc_write_if_changed(${_fc_inst_dir}/instances_${dir}.inc "${_fc_enabled_${dir}}")
endforeach()
# Drop generated files of rows that were removed or switched off (and the single list of
# enabled rows that came before the per-direction ones).
file(REMOVE ${_fc_inst_dir}/instances_enabled.inc)
file(GLOB _fc_old_sources ${_fc_inst_dir}/*.cu)
foreach(f IN LISTS _fc_old_sources)
  if(NOT f IN_LIST _fc_inst_sources AND NOT f IN_LIST _fc_sm90_sources)
    file(REMOVE ${f})
  endif()
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.inc
                                                                ${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.cmake)

# ptxas reports every register spill (-warn-spills), but in the instances listed here, whose
# spill is known and accepted (docs/cuda.md, "Register spills"):
# - fwd_sm80_tf32_hd256_32x16_w2_o2: a 16-row warp's O at hd256 in fp32 takes 128 of the
#   255 registers a thread may have; ptxas spills 4 bytes for sm_80, sm_86 and sm_89, none for
#   sm_90 (nvcc 13.0). It is the hd256 TF32 tile of every device whose blocks cannot have
#   192 KiB of shared memory (A100, sm_86, sm_89: 128x16 does not fit), and on sm_90 it runs
#   only where 128x16 would leave SMs idle (policy.cpp: pick_sm80), i.e. on problems of a few
#   microseconds. Its score variants' kernel (_variants) spills nothing.
# - bwd_sm80_{f16,bf16}_hd64_128x128_w8_o1_q2: the query-split backward holds dK and dV of 32
#   keys (128 fp32 registers) beside P^T and dP^T; ptxas spills 24-28 bytes (sm_80, sm_90),
#   a few loop-invariant values reloaded per query block. The first hd64 row (1.01-1.07x the
#   128x128 row's speed on an H200).
# - kvc_sm80_{f16,bf16}e4m3_hd128_16x64_w4_o3: the e4m3 cache's key loop in its two forms (one
#   and two 8-row N fragments) at 168 registers (3 CTAs per SM); ptxas keeps one value (4
#   bytes) in local memory, stored before the key loop and read after it (repair, epilogue).
set(_fc_known_spills fwd_sm80_tf32_hd256_32x16_w2_o2 bwd_sm80_f16_hd64_128x128_w8_o1_q2
                     bwd_sm80_bf16_hd64_128x128_w8_o1_q2 kvc_sm80_f16e4m3_hd128_16x64_w4_o3
                     kvc_sm80_bf16e4m3_hd128_16x64_w4_o3)
foreach(src IN LISTS _fc_inst_sources _fc_sm90_sources)
  get_filename_component(key ${src} NAME_WE)
  if(NOT key IN_LIST _fc_known_spills)
    set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS -Xptxas=-warn-spills)
  endif()
endforeach()

# The libraries that link these objects (created after this file) take the kernels' dialect
# too: without it CMake derives CUDA20 from CMAKE_CXX_STANDARD, which its Makefile generator
# (CMake 3.25) does not know how to ask nvcc for, and configuring failed there.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
add_library(flashcore_cuda_obj OBJECT ${_fc_inst_sources})
set_target_properties(flashcore_cuda_obj PROPERTIES
  CUDA_ARCHITECTURES "${_fc_cuda_archs}"
  CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON CUDA_VISIBILITY_PRESET hidden)
target_include_directories(flashcore_cuda_obj PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(flashcore_cuda_obj PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3>)

set(_fc_cuda_objs $<TARGET_OBJECTS:flashcore_cuda_obj>)
if(_fc_sm90_sources)
  add_library(flashcore_cuda_sm90_obj OBJECT ${_fc_sm90_sources})
  set_target_properties(flashcore_cuda_sm90_obj PROPERTIES
    CUDA_ARCHITECTURES OFF
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
    POSITION_INDEPENDENT_CODE ON CUDA_VISIBILITY_PRESET hidden)
  target_include_directories(flashcore_cuda_sm90_obj PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(flashcore_cuda_sm90_obj PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a -O3>)
  list(APPEND _fc_cuda_objs $<TARGET_OBJECTS:flashcore_cuda_sm90_obj>)
endif()

# The host side: coordination and checks (backend.cpp), the kernel-choice policy (plain C++,
# tested without a GPU), the instance registry, device queries, workspace and launches.
target_sources(flashcore_obj PRIVATE cuda/backend.cpp cuda/bwd_backend.cpp cuda/device.cpp cuda/launch.cpp
                                     cuda/kvcache_host.cpp cuda/merge_states_host.cpp cuda/policy.cpp cuda/problem_checks.cpp cuda/registry.cpp cuda/workspace.cpp)
# The kernels go into both libraries next to flashcore_obj's objects; the libraries are
# created after this file is included, hence the deferred calls.
cmake_language(DEFER CALL target_sources flashcore PRIVATE ${_fc_cuda_objs})
cmake_language(DEFER CALL target_sources flashcore_static PRIVATE ${_fc_cuda_objs})
target_include_directories(flashcore_obj PRIVATE ${_fc_inst_dir})
target_link_libraries(flashcore_obj PRIVATE CUDA::cudart)
target_compile_definitions(flashcore_config INTERFACE FC_BUILD_CUDA)
list(APPEND FLASHCORE_EXTRA_LINK CUDA::cudart)
