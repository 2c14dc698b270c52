# fc_isa_sources(<target> <define target> <define scope> <define> FLAGS <flags...> SOURCES <files...>)
# Sources of one x86 ISA extension, each compiled with that ISA's flags (only these TUs may
# contain its instructions; run-time cpuid checks decide whether they are called). Added
# only when the compiler takes the flags, and then <define> is set on <define target>
# (the kernel lists and probes are guarded by it), so an older compiler still builds the
# rest. Must be called from the directory that owns <target>'s sources.
include(CheckCXXCompilerFlag)
function(fc_isa_sources target def_target def_scope define)
  cmake_parse_arguments(ARG "" "" "FLAGS;SOURCES" ${ARGN})
  string(REPLACE ";" " " flag_str "${ARG_FLAGS}")
  string(MAKE_C_IDENTIFIER "FC_CXX_TAKES_${define}" ok)
  check_cxx_compiler_flag("${flag_str}" ${ok})
  if(${ok})
    target_sources(${target} PRIVATE ${ARG_SOURCES})
    set_source_files_properties(${ARG_SOURCES} PROPERTIES COMPILE_OPTIONS "${ARG_FLAGS}")
    target_compile_definitions(${def_target} ${def_scope} ${define})
  endif()
endfunction()
