# CUDA backend (included from src/CMakeLists.txt when FLASHCORE_WITH_CUDA).
#
# instances.inc is the one list of forward kernels; every row (minus the axes switched
# off below) becomes its own small .cu in the build tree, so the instances compile in
# parallel, and backend.cpp's registry is built from the same filtered list.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(FLASHCORE_CUDA_ARCHS "80;86;89;90" CACHE STRING
    "SASS targets of the CUDA kernels (PTX of the last one is embedded too); e.g. 90 for a quick Hopper-only build")
set(FLASHCORE_CUDA_DTYPES "f16;bf16;tf32;e4m3" CACHE STRING
    "Tensor-core instances to build: f16, bf16, tf32 (fp32 storage; the exact FFMA kernel is always built), e4m3 (sm90 only)")
set(FLASHCORE_CUDA_HDIMS "64;96;128;256" CACHE STRING "Head-dim instances to build (64, 96, 128, 256)")

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
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.inc _fc_rows REGEX "^FC_SM80_FWD\\(")
set(_fc_enabled "")
set(_fc_inst_sources ${CMAKE_CURRENT_SOURCE_DIR}/cuda/inst_simt_f32.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/vt_fp8.cu)
foreach(row IN LISTS _fc_rows)
  string(REGEX MATCH "FC_SM80_FWD\\(([a-z0-9]+), *([A-Za-z0-9_]+), *([0-9]+), *([0-9]+), *([0-9]+), *([0-9]+), *([0-9]+), *([0-9]+)\\)" _m "${row}")
  set(dt ${CMAKE_MATCH_1})
  set(ty ${CMAKE_MATCH_2})
  set(hd ${CMAKE_MATCH_3})
  set(bm ${CMAKE_MATCH_4})
  set(bn ${CMAKE_MATCH_5})
  set(wp ${CMAKE_MATCH_6})
  set(st ${CMAKE_MATCH_7})
  set(oc ${CMAKE_MATCH_8})
  if(NOT dt IN_LIST FLASHCORE_CUDA_DTYPES OR NOT hd IN_LIST FLASHCORE_CUDA_HDIMS)
    continue()
  endif()
  set(key fwd_sm80_${dt}_hd${hd}_${bm}x${bn}_w${wp}_o${oc})
  if(NOT st EQUAL 2)
    set(key ${key}_s${st})
  endif()
  string(APPEND _fc_enabled "FC_SM80_INST(${key}, ${dt}, ${hd}, ${bm}, ${bn}, ${wp}, ${st}, ${oc})\n")
  set(_src ${_fc_inst_dir}/${key}.cu)
  set(_txt "// Generated from src/cuda/instances.inc by src/cuda/sources.cmake; do not edit.\n#include \"cuda/kernels/fwd_sm80.cuh\"\n\nnamespace flashcore::cuda {\ncudaError_t ${key}(const FwdParams& p, cudaStream_t stream) {\n  return launch_fwd_sm80<${ty}, ${hd}, ${bm}, ${bn}, ${wp}, ${st}, ${oc}>(p, stream);\n}\n}  // namespace flashcore::cuda\n")
  _fc_write_if_changed(${_src} "${_txt}")
  list(APPEND _fc_inst_sources ${_src})
endforeach()
# Hopper rows: sm_90a only, so they are built only when 90 is among the SASS targets, in
# their own object library (no other arch is compiled for them).
set(_fc_sm90_sources "")
if("90" IN_LIST FLASHCORE_CUDA_ARCHS)
  file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.inc _fc_rows90 REGEX "^FC_SM90_FWD\\(")
  foreach(row IN LISTS _fc_rows90)
    string(REGEX MATCH "FC_SM90_FWD\\(([a-z0-9]+), *([A-Za-z0-9_]+), *([0-9]+), *([0-9]+), *([0-9]+), *([0-9]+)\\)" _m "${row}")
    set(dt ${CMAKE_MATCH_1})
    set(ty ${CMAKE_MATCH_2})
    set(hd ${CMAKE_MATCH_3})
    set(bm ${CMAKE_MATCH_4})
    set(bn ${CMAKE_MATCH_5})
    set(st ${CMAKE_MATCH_6})
    if(NOT dt IN_LIST FLASHCORE_CUDA_DTYPES OR NOT hd IN_LIST FLASHCORE_CUDA_HDIMS)
      continue()
    endif()
    set(key fwd_sm90_${dt}_hd${hd}_${bm}x${bn}_s${st})
    string(APPEND _fc_enabled "FC_SM90_INST(${key}, ${dt}, ${hd}, ${bm}, ${bn}, ${st})\n")
    set(_src ${_fc_inst_dir}/${key}.cu)
    set(_txt "// Generated from src/cuda/instances.inc by src/cuda/sources.cmake; do not edit.\n#include \"cuda/kernels/fwd_sm90.cuh\"\n\nnamespace flashcore::cuda {\ncudaError_t ${key}(const FwdParams& p, cudaStream_t stream) {\n  return launch_fwd_sm90<${ty}, ${hd}, ${bm}, ${bn}, ${st}>(p, stream);\n}\n}  // namespace flashcore::cuda\n")
    _fc_write_if_changed(${_src} "${_txt}")
    list(APPEND _fc_sm90_sources ${_src})
  endforeach()
endif()
# Drop generated files of rows that were removed or switched off.
file(GLOB _fc_old_sources ${_fc_inst_dir}/*.cu)
foreach(f IN LISTS _fc_old_sources)
  if(NOT f IN_LIST _fc_inst_sources AND NOT f IN_LIST _fc_sm90_sources)
    file(REMOVE ${f})
  endif()
endforeach()
set(_fc_enabled_file ${_fc_inst_dir}/instances_enabled.inc)
_fc_write_if_changed(${_fc_enabled_file} "${_fc_enabled}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/instances.inc)

add_library(flashcore_cuda_obj OBJECT ${_fc_inst_sources})
set_target_properties(flashcore_cuda_obj PROPERTIES
  CUDA_ARCHITECTURES "${_fc_cuda_archs}"
  CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON CUDA_VISIBILITY_PRESET hidden)
target_include_directories(flashcore_cuda_obj PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(flashcore_cuda_obj PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xptxas=-warn-spills>)

set(_fc_cuda_objs $<TARGET_OBJECTS:flashcore_cuda_obj>)
if(_fc_sm90_sources)
  add_library(flashcore_cuda_sm90_obj OBJECT ${_fc_sm90_sources})
  set_target_properties(flashcore_cuda_sm90_obj PROPERTIES
    CUDA_ARCHITECTURES OFF
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
    POSITION_INDEPENDENT_CODE ON CUDA_VISIBILITY_PRESET hidden)
  target_include_directories(flashcore_cuda_sm90_obj PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(flashcore_cuda_sm90_obj PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a -O3 -Xptxas=-warn-spills>)
  list(APPEND _fc_cuda_objs $<TARGET_OBJECTS:flashcore_cuda_sm90_obj>)
endif()

target_sources(flashcore_obj PRIVATE cuda/backend.cpp)
# The kernels go into both libraries next to flashcore_obj's objects; the libraries are
# created after this file is included, hence the deferred calls.
cmake_language(DEFER CALL target_sources flashcore PRIVATE ${_fc_cuda_objs})
cmake_language(DEFER CALL target_sources flashcore_static PRIVATE ${_fc_cuda_objs})
target_include_directories(flashcore_obj PRIVATE ${_fc_inst_dir})
target_link_libraries(flashcore_obj PRIVATE CUDA::cudart)
target_compile_definitions(flashcore_config INTERFACE FC_BUILD_CUDA)
list(APPEND FLASHCORE_EXTRA_LINK CUDA::cudart)
