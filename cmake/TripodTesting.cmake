# tripod_add_test(NAME SOURCES src... [LIBS ...] [LABELS ...] [ARGS ...] [TIMEOUT s]
#                 [EXECUTABLE target])
# One executable (named NAME, or EXECUTABLE to register an existing one again
# with other ARGS), registered with ctest under NAME with the given labels.
# (In the spirit of llama.cpp's llama_build_and_test.)
# main() of every test: googletest's, with "every test skipped" reported to
# ctest as Skipped (exit code 77) rather than Passed.
function(tripod_test_main)
  if(NOT TARGET tripod_gtest_main)
    add_library(tripod_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/testing/gtest_main.cpp)
    target_link_libraries(tripod_gtest_main PUBLIC GTest::gtest)
    target_compile_features(tripod_gtest_main PRIVATE cxx_std_20)
  endif()
endfunction()

function(tripod_add_test name)
  tripod_test_main()
  cmake_parse_arguments(T "" "TIMEOUT;EXECUTABLE" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  if(NOT T_EXECUTABLE)
    set(T_EXECUTABLE ${name})
  endif()
  if(NOT TARGET ${T_EXECUTABLE})
    add_executable(${T_EXECUTABLE} ${T_SOURCES})
    target_link_libraries(${T_EXECUTABLE} PRIVATE ${T_LIBS} GTest::gtest tripod_gtest_main)
    # Every test may run on the CPU reference backend (the modules above
    # backend/ link only its interface, tripod_backend).
    if(TARGET tripod_backend_cpu)
      target_link_libraries(${T_EXECUTABLE} PRIVATE tripod_backend_cpu)
    endif()
    target_include_directories(${T_EXECUTABLE} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
    target_compile_features(${T_EXECUTABLE} PRIVATE cxx_std_20)
  endif()
  add_test(NAME ${name} COMMAND ${T_EXECUTABLE} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "TRIPOD_BIN=$<TARGET_FILE:tripod>;TRIPOD_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=1")
endfunction()
