# One-line helpers: a library per folder, a test per unit.
#
#   tandem_library(NAME engine SOURCES a.cc b.cc DEPS common torch)
#   tandem_test(NAME engine_config_test SOURCES config_test.cc DEPS engine_config
#               LABELS engine_config)
#
# Every target compiles with warnings on and sees the repository root as its include root,
# so headers are included as "engine_config/config.h".
function(tandem_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SOURCES})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${ARG_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  set_target_properties(${ARG_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# LibTorch's headers take 15 s to parse and every translation unit that uses them would parse them
# again: <torch/torch.h> is precompiled once per build (torch_pch, CMakeLists.txt), and each target
# whose sources include LibTorch reuses it. GCC takes a precompiled header only when the compile
# flags and the macros defined when it was made match, so torch_pch defines none of the project's
# own, -fPIC is passed to executables too, and -Werror=invalid-pch turns a silent fallback to
# parsing into an error.
function(tandem_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM torch_pch)
  target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC -Werror=invalid-pch>)
endfunction()

function(tandem_test)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock tandem_test_main)
  # A test's own code calls into the libraries, which keep the build's optimisation; -Og compiles its
  # LibTorch- and GoogleTest-heavy translation units about 40% faster than -O2 and still defines
  # __OPTIMIZE__, as the shared precompiled header was made with.
  target_compile_options(${ARG_NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter
                         $<$<CONFIG:RelWithDebInfo,Release>:-Og>)
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT 600 LABELS "${ARG_LABELS}")
endfunction()
