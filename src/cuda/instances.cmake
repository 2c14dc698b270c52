# Reads the instance table (src/cuda/instances.inc) without compiling anything, so that the
# CUDA build (sources.cmake) and the policy's tests (tests/cuda/CMakeLists.txt, every
# configuration) see the same rows and keys.
#
# fc_cuda_instance_rows(<family> <direction> <dtypes> <hdims> <prefix>): the rows
# FC_<FAMILY>(<direction>, dtype key, type, head dim, tile fields...) whose dtype key is in
# <dtypes> and head dim in <hdims> (both lists; "*" takes all), in table order, as three
# lists in the caller's scope:
#   <prefix>_KEYS   <dir>_sm80_<dt>_hd<D>_<bm>x<bn>_w<warps>_o<ctas>[_s<stages> unless 2],
#                   <dir>_sm90_<dt>_hd<D>_<bm>x<bn>_s<stages>[_p persistent, _vt fp8 V^T in the kernel,
#                   _sv the score variants' kernel, _p_sv both persistent and that]
#   <prefix>_REGS   the registry's FC_<FAMILY>_INST(key, dtype key, head dim, tile fields...) lines
#   <prefix>_TMPLS  the launcher's template arguments (type, head dim, tile fields...)
set(_FC_INSTANCES_INC ${CMAKE_CURRENT_LIST_DIR}/instances.inc)
set(FC_CUDA_DIRECTIONS fwd bwd kvc)
function(fc_cuda_instance_rows family dir dtypes hdims prefix)
  file(STRINGS ${_FC_INSTANCES_INC} rows REGEX "^FC_${family}\\( *${dir} *,")
  string(TOLOWER ${family} fam)
  set(keys "")
  set(regs "")
  set(tmpls "")
  foreach(row IN LISTS rows)
    string(REGEX REPLACE "^FC_${family}\\(([^)]*)\\).*$" "\\1" args "${row}")
    string(REPLACE " " "" args "${args}")
    string(REPLACE "," ";" args "${args}")
    list(REMOVE_AT args 0)  # the direction
    list(GET args 0 dt)
    list(GET args 2 hd)
    list(GET args 3 bm)
    list(GET args 4 bn)
    if((NOT dtypes STREQUAL "*" AND NOT dt IN_LIST dtypes) OR (NOT hdims STREQUAL "*" AND NOT hd IN_LIST hdims))
      continue()
    endif()
    if(family STREQUAL "SM80")
      list(GET args 5 wp)
      list(GET args 6 st)
      list(GET args 7 oc)
      set(key ${dir}_${fam}_${dt}_hd${hd}_${bm}x${bn}_w${wp}_o${oc})
      if(NOT st EQUAL 2)
        set(key ${key}_s${st})
      endif()
    else()
      list(GET args 5 st)
      list(GET args 6 ps)
      set(key ${dir}_${fam}_${dt}_hd${hd}_${bm}x${bn}_s${st})
      if(ps EQUAL 1)
        set(key ${key}_p)
      elseif(ps EQUAL 2)
        set(key ${key}_vt)
      elseif(ps EQUAL 3)
        set(key ${key}_sv)
      elseif(ps EQUAL 4)
        set(key ${key}_p_sv)
      endif()
    endif()
    list(GET args 1 ty)
    list(REMOVE_AT args 1)  # the registry takes the dtype key, not the C++ type
    string(REPLACE ";" ", " reg_args "${args}")
    list(REMOVE_AT args 0)
    string(REPLACE ";" ", " tmpl_args "${ty};${args}")
    list(APPEND keys ${key})
    list(APPEND regs "FC_${family}_INST(${key}, ${reg_args})")
    list(APPEND tmpls "${tmpl_args}")
  endforeach()
  set(${prefix}_KEYS "${keys}" PARENT_SCOPE)
  set(${prefix}_REGS "${regs}" PARENT_SCOPE)
  set(${prefix}_TMPLS "${tmpls}" PARENT_SCOPE)
endfunction()
