# The layering of Tandem's libraries, checked: a folder's sources include headers of its own folder
# and of folders in lower layers only, never of its own layer's other folders or of a layer above.
#
#   cmake -DROOT=<source tree> -P cmake/check_layers.cmake
#
# Fails naming each file, line and include that crosses upward, and when the table of layers in
# docs/design.md (§6) differs from this list. The layers, lowest first:
set(TANDEM_LAYERS
  "common kernels proto"
  "platform engine_config tokenizer rundir rpc"
  "engine transport data"
  "parallel"
  "models"
  "jobspec"
  "hf"
  "step"
  "coordinator trainer actors"
  "cli")

if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<source tree>")
endif()
set(layer 0)
foreach(folders IN LISTS TANDEM_LAYERS)
  string(REPLACE " " ";" folders "${folders}")
  foreach(folder IN LISTS folders)
    set(layer_of_${folder} ${layer})
  endforeach()
  math(EXPR layer "${layer} + 1")
endforeach()

set(violations "")
set(checked 0)
foreach(folders IN LISTS TANDEM_LAYERS)
  string(REPLACE " " ";" folders "${folders}")
  foreach(folder IN LISTS folders)
    file(GLOB_RECURSE sources "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cc" "${ROOT}/${folder}/*.cu")
    foreach(source IN LISTS sources)
      math(EXPR checked "${checked} + 1")
      file(STRINGS "${source}" lines)
      set(number 0)
      foreach(line IN LISTS lines)
        math(EXPR number "${number} + 1")
        if(line MATCHES "^#include \"([a-z_]+)/")
          set(target "${CMAKE_MATCH_1}")
          if(DEFINED layer_of_${target} AND NOT target STREQUAL folder
             AND NOT layer_of_${target} LESS layer_of_${folder})
            file(RELATIVE_PATH relative "${ROOT}" "${source}")
            string(APPEND violations "\n  ${relative}:${number}: ${line}  (${folder}/ is layer "
                   "${layer_of_${folder}}, ${target}/ is layer ${layer_of_${target}})")
          endif()
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "check_layers.cmake: no sources under ${ROOT}")
endif()
if(violations)
  message(FATAL_ERROR "includes that cross a layer upward:${violations}")
endif()

# docs/design.md shows the layers as table rows "| N | `a`, `b` |": the same, in the same order.
if(EXISTS "${ROOT}/docs/design.md")
  file(STRINGS "${ROOT}/docs/design.md" rows REGEX "^\\| [0-9]+ \\| `")
  set(expected "")
  set(layer 0)
  foreach(folders IN LISTS TANDEM_LAYERS)
    string(REPLACE " " "`, `" listed "${folders}")
    list(APPEND expected "| ${layer} | `${listed}` |")
    math(EXPR layer "${layer} + 1")
  endforeach()
  if(NOT "${rows}" STREQUAL "${expected}")
    string(REPLACE ";" "\n  " rows_text "${rows}")
    string(REPLACE ";" "\n  " expected_text "${expected}")
    message(FATAL_ERROR "docs/design.md's table of layers differs from TANDEM_LAYERS in "
            "cmake/check_layers.cmake:\n  ${rows_text}\nexpected:\n  ${expected_text}")
  endif()
endif()
message(STATUS "layering: ${checked} files include only their own folder and lower layers")
