# tests/run_tests.sh, which every test target runs the tests through: its
# summary, and a hung test stopped after HR_TEST_TIMEOUT seconds.
UNIT_TESTS += tests/unit/test_run_tests.sh

# bench/gpu_report.sh (make gpu-report): its refusals where there is no GPU.
UNIT_TESTS += tests/unit/test_gpu_report.sh
