# Finds every dependency once. CUDA is optional: the CUDA kernels build when nvcc is found, the NCCL
# backend when, in addition, LibTorch itself was built with CUDA (it needs the current-stream API).
#
# The system protobuf is found before LibTorch: LibTorch's targets name protobuf::libprotobuf, and
# the pip wheel's CMake (which embeds its own hidden protobuf) defines it as an empty alias when it
# does not exist yet, which would leave the generated code of proto/ without its library.
find_package(Protobuf REQUIRED)
# TorchConfig finds libtorch and libc10 with find_library(... PATHS <its lib/>), which searches the
# system directories first: with Debian's libtorch-dev installed, a pip LibTorch found through
# torch.utils.cmake_prefix_path (.../torch/share/cmake) would link Debian's libc10. A package root is
# searched before the system, so Torch_ROOT is that LibTorch's own prefix.
if(NOT DEFINED Torch_ROOT)
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${prefix}/Torch/TorchConfig.cmake")
      get_filename_component(Torch_ROOT "${prefix}/../.." ABSOLUTE)
      break()
    endif()
  endforeach()
endif()
if(NOT TANDEM_CUDA STREQUAL "OFF")
  # A CUDA LibTorch (the pip wheel) enables CUDA itself while it is found. It takes the nvcc dialect
  # from CMAKE_CUDA_STANDARD (else C++20, which CMake 3.25 cannot pass to nvcc 13) and the
  # architectures from TORCH_CUDA_ARCH_LIST (else it runs a program to detect the GPUs): the same as
  # CMAKE_CUDA_ARCHITECTURES 80 90 below, SASS and PTX for each. CMP0104 stays OLD while it is found,
  # so that enabling CUDA gives CMAKE_CUDA_ARCHITECTURES no default for its CMake to warn about.
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  # CMake 3.25 knows no C++20 flag for nvcc 13, and the kernels need only C++17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0+PTX;9.0+PTX")
  endif()
endif()
cmake_policy(PUSH)
cmake_policy(SET CMP0104 OLD)
find_package(Torch REQUIRED)
cmake_policy(POP)
if(EXISTS "${TORCH_INSTALL_PREFIX}/__init__.py")
  # LibTorch from PyPI's torch wheel. Its libraries export their own static copies of libstdc++
  # functions newer than the system's (pytorch#133437): libtorch.so's std::filesystem::remove_all,
  # for one, calls a function that libstdc++ 12 lacks through a weak, here null, reference. The
  # library first in an executable's DT_NEEDED list serves such a symbol to the whole process, so
  # every executable names libstdc++ first.
  add_link_options(LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state)
  # The wheel ships the libgomp.so.1 that libtorch_cpu.so needs beside it, and the build tree's
  # RPATH makes every process load that one. The kernels' OpenMP links the same file, so a process
  # has one OpenMP runtime and CMake no second libgomp to warn about.
  if(EXISTS "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1" AND NOT DEFINED OpenMP_gomp_LIBRARY)
    set(OpenMP_gomp_LIBRARY "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1" CACHE FILEPATH
        "The OpenMP runtime of LibTorch")
  endif()
endif()
# The CPU kernels' threads; every target that includes LibTorch through the shared precompiled
# header compiles with it too, since that header was made with _OPENMP defined.
find_package(OpenMP REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
# CRC-32 of every tensor in a safetensors file (engine/safetensors.cc); libpng needs it anyway.
find_package(ZLIB REQUIRED)
# The Hugging Face tokenizers' pre-tokenizer regexes (\p{L}, lookahead) and NFC normalisation.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(ICU REQUIRED COMPONENTS uc data)
if(TANDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

set(TANDEM_HAVE_CUDA_KERNELS OFF)
set(TANDEM_HAVE_NCCL OFF)
if(NOT TANDEM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(TARGET torch::cudart)
      # A CUDA LibTorch put its TORCH_CUDA_ARCH_LIST into CMAKE_CUDA_FLAGS already.
      set(CMAKE_CUDA_ARCHITECTURES OFF)
    elseif(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TANDEM_HAVE_CUDA_KERNELS ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT PATH_SUFFIXES lib lib64)
    if(TARGET torch_cuda AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(TANDEM_HAVE_NCCL ON)
    endif()
  elseif(TANDEM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TANDEM_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "Tandem: LibTorch ${Torch_VERSION}, CUDA kernels ${TANDEM_HAVE_CUDA_KERNELS}, NCCL backend ${TANDEM_HAVE_NCCL}")
