# policy/: the budget policy (policy.h), a pure module that headroomd and
# libheadroom both link: the daemon for every GPU's budget, the library
# for the budgets it computes when no daemon answers. It needs nothing
# else (no codec, no libc beyond snprintf), so its unit test links it alone.
POLICY_OBJS := $(OBJDIR)/policy/policy.o
