# retryd - build, run, test and benchmark. One flat Makefile, no autotools.
#
#   make             build build/retryd (installs missing Debian packages first)
#   make run         embedded Redis under ./var/ + retryd on 127.0.0.1:8080
#   make test        unit, Lua integration and end-to-end HTTP suites
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make lint        cppcheck over src/

CC      ?= cc
SANITIZE ?= 0
BUILD   := build$(if $(filter 1,$(SANITIZE)),/san,)

LLHTTP_SRC := /usr/share/llhttp
LLHTTP_INC := /usr/share/include/llhttp
PKGS       := libuv hiredis libcjson

WARN    := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes
CFLAGS  := -std=c11 -O2 -g -D_GNU_SOURCE $(WARN) -Iinclude -I$(LLHTTP_INC) -MMD -MP
LDLIBS  := -lm
ifeq ($(SANITIZE),1)
  CFLAGS  += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# Modules shared by the daemon and the tests (everything but main).
LIB_SRC := alloc buf log config keys json problem http router redis store waiters metrics auth \
           message request api promoter
LIB_OBJ := $(LIB_SRC:%=$(BUILD)/%.o) $(BUILD)/lua_library.o \
           $(BUILD)/llhttp/llhttp.o $(BUILD)/llhttp/api.o $(BUILD)/llhttp/http.o

UNIT_TESTS := test_keys test_router test_request test_message test_config test_problem
INTEG_TESTS := test_http test_lua test_e2e
TEST_BINS := $(UNIT_TESTS:%=$(BUILD)/tests/%) $(INTEG_TESTS:%=$(BUILD)/tests/%)

.PHONY: all deps run test unit bench lint clean
all: deps $(BUILD)/retryd

deps:
	@scripts/deps.sh

$(BUILD)/retryd: $(BUILD)/server.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

$(BUILD)/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

# llhttp's C sources come from Debian's node-llhttp; they are not ours to lint.
$(BUILD)/llhttp/%.o: $(LLHTTP_SRC)/%.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -g -w -I$(LLHTTP_INC) $(filter -fsanitize=%,$(CFLAGS)) -c -o $@ $<

# The Functions library: lua/*.lua in name order, embedded as a C string.
$(BUILD)/retryd.lua: $(sort $(wildcard lua/*.lua))
	@mkdir -p $(@D)
	cat $^ > $@

$(BUILD)/lua_library.c: $(BUILD)/retryd.lua scripts/embed.sh
	scripts/embed.sh rd_lua_library $< > $@

$(BUILD)/lua_library.o: $(BUILD)/lua_library.c
	$(CC) -std=c11 -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -Wno-unused-parameter -o $@ $< $(LIB_OBJ) \
	    $(LDFLAGS) $(PKG_LIBS) -lcmocka $(LDLIBS)

run: all
	scripts/run.sh $(BUILD)/retryd

test: all $(TEST_BINS) $(BUILD)/retryd.lua
	BUILD=$(BUILD) scripts/test.sh $(UNIT_TESTS) -- $(INTEG_TESTS)

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	    --suppress=missingIncludeSystem -Iinclude src

clean:
	rm -rf build

-include $(wildcard $(BUILD)/*.d $(BUILD)/tests/*.d)
