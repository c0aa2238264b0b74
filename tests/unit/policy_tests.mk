# The budget policy: pure, so its test links nothing but the policy.
UNIT_TESTS += $(TESTBIN)/test_policy

$(TESTBIN)/test_policy: $(OBJDIR)/tests/unit/test_policy.o $(OBJDIR)/policy/policy.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CMOCKA)
