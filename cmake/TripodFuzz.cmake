# TRIPOD_FUZZ: build the libFuzzer targets of tests/fuzz/ (docs/testing.md).
# libFuzzer ships with clang only, so this needs CMAKE_CXX_COMPILER=clang++.
# Everything in such a build is instrumented for coverage and compiled with
# AddressSanitizer and UndefinedBehaviorSanitizer (any UB aborts), so the
# readers under test report their bugs wherever they happen; the fuzz
# executables themselves link libFuzzer's main (-fsanitize=fuzzer).
option(TRIPOD_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)
if(TRIPOD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TRIPOD_FUZZ=ON needs clang (libFuzzer is part of clang), but the C++ compiler is "
            "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}. Use a separate build folder: apt-get install clang; "
            "cmake --preset fuzz (build-fuzz/), or -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "
            "-DTRIPOD_FUZZ=ON -DTRIPOD_CUDA=OFF in a fresh folder. Without clang, the regression corpus still replays in the "
            "default suite (tests fuzz_*_replay).")
  endif()
  set(_tripod_fuzz_flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer -g)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_tripod_fuzz_flags}>" "$<$<COMPILE_LANGUAGE:C>:${_tripod_fuzz_flags}>")
  add_link_options(-fsanitize=address,undefined)
endif()
