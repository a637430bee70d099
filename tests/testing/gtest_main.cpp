// main() of the test executables: googletest's, except that a run in which
// every selected test was skipped (the GPU tests on a machine without a GPU,
// the oracle without PyTorch) exits with kSkipExitCode, which ctest reports
// as "Skipped" (SKIP_RETURN_CODE in cmake/TripodTesting.cmake) instead of
// "Passed". A run with any failure still fails; one with any test that ran
// and passed still passes. Executables with their own main() keep it.
#include <gtest/gtest.h>

namespace {
constexpr int kSkipExitCode = 77;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const auto& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.failed_test_count() == 0 && u.test_to_run_count() > 0 &&
      u.skipped_test_count() == u.test_to_run_count())
    return kSkipExitCode;
  return rc;
}
