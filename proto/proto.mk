# proto/: the wire codec, linked into both the daemon and libheadroom.
# hr_json: checked cJSON access; hr_payload: budget, policy, detail,
# topology; hr_request / hr_reply / hr_status / hr_metrics: the messages;
# hr_fastenc: the hot replies without a tree;
# hr_raises: the raises_get/raises_clear bodies;
# hr_names: the enum name tables; hr_buf: the capped output buffer;
# hr_error: hr_strerror, the names of the HR_E* codes (proto/hr_types.h).
PROTO_OBJS := $(OBJDIR)/proto/hr_json.o $(OBJDIR)/proto/hr_payload.o \
              $(OBJDIR)/proto/hr_request.o $(OBJDIR)/proto/hr_reply.o \
              $(OBJDIR)/proto/hr_status.o $(OBJDIR)/proto/hr_metrics.o \
              $(OBJDIR)/proto/hr_buf.o $(OBJDIR)/proto/hr_fastenc.o \
              $(OBJDIR)/proto/hr_names.o $(OBJDIR)/proto/hr_error.o \
              $(OBJDIR)/proto/hr_raises.o
