# kvstitch build. `make` builds the CLI and the library, `make test` runs
# every test (fetching the model first), `make bench` runs the benchmarks.
#   SANITIZE=address,undefined make test   builds into build/san and runs under sanitizers
#   make fuzz FUZZ_SECONDS=60              runs the libFuzzer targets (clang)
CC      ?= cc
ifneq ($(SANITIZE),)
# -O1 under sanitizers (as ASan advises): the unrolled kernels instrumented
# at -O2 took 7.6 of CI's ~33 minutes to build (matmul_avx512.c alone ~2
# min), at -O1 4.3, and the sanitized tests run about as long.
OPT     ?= -O1
endif
OPT     ?= -O2
ARCH    ?= -march=native
CFLAGS  ?= $(OPT) -g
# -ffp-contract=off: every path's float steps are written out one by one and
# must stay so (a scalar a * b - c fused into an fma would round once where
# the vector paths round twice). GCC's -std=c11 implies it; clang's default
# does not.
CFLAGS  += -std=c11 -ffp-contract=off $(ARCH) -Wall -Wextra -Wshadow -Wno-unused-parameter \
           -D_GNU_SOURCE -Iinclude -Isrc -pthread -MMD -MP
LDLIBS  += -lm -pthread
BUILD   ?= build

# System packages (scripts/install-deps.sh installs them; quiet when present).
ifeq ($(filter clean,$(MAKECMDGOALS)),)
DEPS_STATUS := $(shell scripts/install-deps.sh >&2 && echo ok)
ifneq ($(DEPS_STATUS),ok)
$(error missing system packages: see the install-deps message above)
endif
endif
SYS_PKGS := libcjson libmicrohttpd hiredis libzstd libcrypto
CFLAGS  += $(shell pkg-config --cflags $(SYS_PKGS) 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs $(SYS_PKGS) 2>/dev/null || echo -lcjson -lmicrohttpd -lhiredis -lzstd -lcrypto)

ifneq ($(SANITIZE),)
BUILD   := build/san
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
ifneq ($(WERROR),)
CFLAGS  += -Werror
endif

LIB_SRC   := $(shell find src -name '*.c' | sort)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC  := $(wildcard tools/*.c)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
# Shared by the clients of kvstitch.h (CLI, benchmarks, tests, server): JSON on cJSON.
CLIENT_OBJ := $(BUILD)/tools/json_util.o
# kvstitch serve (server/): linked into the CLI, a client of include/kvstitch.h.
SERVER_SRC := $(wildcard server/*.c)
TOOL_OBJ  += $(SERVER_SRC:%.c=$(BUILD)/%.o)
.DEFAULT_GOAL := all
$(BUILD)/server/page_html.h: server/page.html
	@mkdir -p $(@D)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(BUILD)/server/page.o: $(BUILD)/server/page_html.h
$(BUILD)/server/page.o: CFLAGS += -I$(BUILD)/server
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
FUZZ_SRC  := $(wildcard fuzz/fuzz_*.c)

# A parallel, quiet build by default: one "CC file" line per object;
# `make V=1` prints the full commands. -j follows the online cores unless
# the caller gave -j (or MAKEFLAGS does).
ifneq ($(V),1)
Q := @
MSG = @printf '  %-6s %s\n'
else
Q :=
MSG = @true
endif
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter j%,$(firstword $(MAKEFLAGS))),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
# git describe for `kvstitch --version`; a stamp that changes only with it,
# so cmd_version.o is rebuilt when the commit moves (it had kept an old one)
GIT_DESCRIBE := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/tools/cmd_version.o: CFLAGS += -DKVS_GIT_DESCRIBE='"$(GIT_DESCRIBE)"'
$(BUILD)/tools/cmd_version.o: $(BUILD)/git-describe.txt
$(BUILD)/git-describe.txt: FORCE
	@mkdir -p $(@D); echo '$(GIT_DESCRIBE)' | cmp -s - $@ || echo '$(GIT_DESCRIBE)' > $@
.PHONY: FORCE
FORCE:

.PHONY: all test bench fuzz demo clean model tests install
all: $(BUILD)/kvstitch $(BUILD)/libkvstitch.a $(BUILD)/libkvstitch.so

$(BUILD)/libkvstitch.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(MSG) AR $@
	$(Q)$(AR) rcs $@ $^

# --- shared library, install, pkg-config ---------------------------------
# Library objects are position-independent (one set serves both libraries)
# and hide every symbol but the KVS_API declarations of include/kvstitch.h.
# The version comes from the header's KVS_VERSION_* macros; while MAJOR is 0
# the soname carries MINOR too (a 0.x minor may change the ABI).
KVS_VERSION := $(shell sed -n 's/^\#define KVS_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' include/kvstitch.h | paste -sd.)
KVS_SONAME  := libkvstitch.so.$(if $(filter 0.%,$(KVS_VERSION)),$(basename $(KVS_VERSION)),$(firstword $(subst ., ,$(KVS_VERSION))))
$(LIB_OBJ): CFLAGS += -fPIC -fvisibility=hidden

$(BUILD)/libkvstitch.so: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(KVS_SONAME) -o $@ $^ $(LDLIBS)

# make install PREFIX=/usr/local [DESTDIR=staging]: header, both libraries
# (libkvstitch.so -> soname -> versioned file) and kvstitch.pc.
PREFIX ?= /usr/local
INSTALL_LIB := $(DESTDIR)$(PREFIX)/lib
install: $(BUILD)/libkvstitch.a $(BUILD)/libkvstitch.so kvstitch.pc.in
	install -d $(DESTDIR)$(PREFIX)/include $(INSTALL_LIB)/pkgconfig
	install -m 644 include/kvstitch.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libkvstitch.a $(INSTALL_LIB)/
	install -m 755 $(BUILD)/libkvstitch.so $(INSTALL_LIB)/libkvstitch.so.$(KVS_VERSION)
	ln -sf libkvstitch.so.$(KVS_VERSION) $(INSTALL_LIB)/$(KVS_SONAME)
	ln -sf $(KVS_SONAME) $(INSTALL_LIB)/libkvstitch.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(KVS_VERSION)|' \
	    -e 's|@REQUIRES_PRIVATE@|$(SYS_PKGS)|' kvstitch.pc.in > $(INSTALL_LIB)/pkgconfig/kvstitch.pc
# --------------------------------------------------------------------------

$(BUILD)/kvstitch: $(TOOL_OBJ) $(BUILD)/libkvstitch.a
	$(MSG) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libkvstitch.a $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(MSG) CC $<
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libkvstitch.a $(CLIENT_OBJ)
	@mkdir -p $(@D)
	$(MSG) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -Itests -Itools -o $@ $< $(CLIENT_OBJ) $(BUILD)/libkvstitch.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libkvstitch.a $(CLIENT_OBJ)
	@mkdir -p $(@D)
	$(MSG) LINK $@
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -Itools -o $@ $< $(CLIENT_OBJ) $(BUILD)/libkvstitch.a $(LDLIBS)

# roofline_probe: tests/test_roofline_report.sh checks its AMX lines.
tests: $(TEST_BIN) $(BUILD)/kvstitch $(BUILD)/libkvstitch.so $(BUILD)/bench/roofline_probe

# The model is fetched into a cache outside the tree (scripts/fetch-model.sh).
test: tests
	@BUILD=$(BUILD) scripts/run-tests.sh

bench: all $(BENCH_BIN)
	@BUILD=$(BUILD) bench/run.sh

demo: all
	@scripts/demo.sh

# The mutation suite (scripts/mutate.sh): small deliberate bugs in a scratch
# copy, each must be killed by the tests that guard it. Not part of `test`.
.PHONY: mutate
mutate: tests
	@BUILD=$(BUILD) scripts/mutate.sh

FUZZ_SECONDS ?= 30
fuzz:
	@scripts/run-fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
