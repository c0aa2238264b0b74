# proto/: the wire codec, linked into both the daemon and libheadroom.
PROTO_OBJS := $(OBJDIR)/proto/hr_proto.o $(OBJDIR)/proto/hr_buf.o \
              $(OBJDIR)/proto/hr_names.o
