# Dependencies, all from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
pkg_check_modules(ICU IMPORTED_TARGET icu-uc)  # NFC for Hugging Face tokenizers
find_package(Gloo QUIET)
if(TRIPOD_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
