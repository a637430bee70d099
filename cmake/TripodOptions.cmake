# Build options (ggml-style list). Set on the cmake command line: -DTRIPOD_CUDA=OFF
set(TRIPOD_CUDA "AUTO" CACHE STRING "Build the CUDA backend and NCCL communicator: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE TRIPOD_CUDA PROPERTY STRINGS AUTO ON OFF)
option(TRIPOD_BUILD_TESTS "Build the GoogleTest suites" ON)
option(TRIPOD_BUILD_BENCH "Build the benchmarks in bench/" ON)
option(TRIPOD_NATIVE "Optimise for this machine's CPU (-march=native)" OFF)
option(TRIPOD_WERROR "Treat warnings as errors" OFF)
option(TRIPOD_SANITIZE_ADDRESS "Build with AddressSanitizer" OFF)
option(TRIPOD_SANITIZE_UNDEFINED "Build with UndefinedBehaviorSanitizer" OFF)
option(TRIPOD_SANITIZE_THREAD "Build with ThreadSanitizer" OFF)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

# tripod_module(NAME SOURCES... DEPS ...) : one static library per folder,
# C++20, warnings on. The link graph is the module dependency diagram.
function(tripod_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(tripod_${name} STATIC ${M_SOURCES})
  target_compile_features(tripod_${name} PUBLIC cxx_std_20)
  target_include_directories(tripod_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(tripod_${name} PUBLIC ${M_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  tripod_warnings(tripod_${name})
endfunction()

function(tripod_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TRIPOD_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TRIPOD_NATIVE}>>:-march=native>)
endfunction()

set(_san "")
if(TRIPOD_SANITIZE_ADDRESS)
  list(APPEND _san -fsanitize=address -fno-omit-frame-pointer)
endif()
if(TRIPOD_SANITIZE_UNDEFINED)
  list(APPEND _san -fsanitize=undefined -fno-sanitize-recover=undefined)
endif()
if(TRIPOD_SANITIZE_THREAD)
  list(APPEND _san -fsanitize=thread)
endif()
if(_san)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_san}>")
  add_link_options(${_san})
endif()
