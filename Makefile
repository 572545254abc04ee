# kvstitch build. `make` builds the CLI and the library, `make test` runs
# every test (fetching the model first), `make bench` runs the benchmarks.
#   SANITIZE=address,undefined make test   builds into build/san and runs under sanitizers
#   make fuzz FUZZ_SECONDS=60              runs the libFuzzer targets (clang)
CC      ?= cc
OPT     ?= -O2
ARCH    ?= -march=native
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 $(ARCH) -Wall -Wextra -Wshadow -Wno-unused-parameter \
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
SYS_PKGS := libcjson libmicrohttpd hiredis libzstd
CFLAGS  += $(shell pkg-config --cflags $(SYS_PKGS) 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs $(SYS_PKGS) 2>/dev/null || echo -lcjson -lmicrohttpd -lhiredis -lzstd)

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

.PHONY: all test bench fuzz demo clean model tests
all: $(BUILD)/kvstitch $(BUILD)/libkvstitch.a

$(BUILD)/libkvstitch.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/kvstitch: $(TOOL_OBJ) $(BUILD)/libkvstitch.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libkvstitch.a $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libkvstitch.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libkvstitch.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libkvstitch.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libkvstitch.a $(LDLIBS)

tests: $(TEST_BIN) $(BUILD)/kvstitch

# The model is fetched into a cache outside the tree (scripts/fetch-model.sh).
test: tests
	@BUILD=$(BUILD) scripts/run-tests.sh

bench: all $(BENCH_BIN)
	@BUILD=$(BUILD) bench/run.sh

demo: all
	@scripts/demo.sh

FUZZ_SECONDS ?= 30
fuzz:
	@scripts/run-fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
