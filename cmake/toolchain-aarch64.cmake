# Cross build for aarch64 Linux with Debian's GNU toolchain (g++-aarch64-linux-gnu), tests run
# under qemu user-mode emulation (qemu-user):
#   cmake -S . -B build/sve -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
#   ctest --test-dir build/sve
# FLASHCORE_QEMU_SVE_BITS picks the emulated SVE vector length (128, 256, 512, ...; it only
# changes the test commands, so re-configuring with another value rebuilds nothing). Set it
# to an empty string to leave the CPU to the QEMU_CPU environment variable instead.
# OpenMP comes from the cross compiler's own libgomp (shipped with g++-aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(FLASHCORE_CROSS_PREFIX aarch64-linux-gnu- CACHE STRING "Prefix of the cross tools")
set(CMAKE_C_COMPILER ${FLASHCORE_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${FLASHCORE_CROSS_PREFIX}g++)
set(FLASHCORE_CROSS_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "Target libraries (qemu -L)")

set(CMAKE_FIND_ROOT_PATH ${FLASHCORE_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(FLASHCORE_QEMU_SVE_BITS 512 CACHE STRING "SVE vector length (bits) of the emulated CPU")
find_program(FLASHCORE_QEMU qemu-aarch64 REQUIRED)
if(FLASHCORE_QEMU_SVE_BITS)
  set(CMAKE_CROSSCOMPILING_EMULATOR
      ${FLASHCORE_QEMU} -L ${FLASHCORE_CROSS_SYSROOT} -cpu max,sve${FLASHCORE_QEMU_SVE_BITS}=on)
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FLASHCORE_QEMU} -L ${FLASHCORE_CROSS_SYSROOT})
endif()

# The SVE backend is what this toolchain is for; CUDA has no place in an aarch64 cross build.
set(FLASHCORE_SVE ON CACHE BOOL "")
set(FLASHCORE_X86 OFF CACHE BOOL "")
set(FLASHCORE_CUDA OFF CACHE STRING "")
