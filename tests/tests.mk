# tests/: shared test helpers. Each suite has its own fragment in
# tests/<suite>/*.mk that appends its programs to UNIT_TESTS, INTEG_TESTS
# or GPU_TESTS.
TESTBIN := $(BUILD)/tests
