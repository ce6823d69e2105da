# retryd - build, run, test and benchmark. One flat Makefile, no autotools.
#
#   make             build build/retryd (installs missing Debian packages first)
#   make run         embedded Redis under ./var/ + retryd on 127.0.0.1:8080
#   make test        every suite (installs valgrind, chromium, and node + npm when missing)
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make lint        cppcheck over src/

CC      ?= cc
SANITIZE ?= 0
BUILD   := build$(if $(filter 1,$(SANITIZE)),/san,)

LLHTTP_SRC := /usr/share/llhttp
LLHTTP_INC := /usr/share/include/llhttp
PKGS       := libuv hiredis libcjson libcurl libssl libcrypto libxml-2.0

WARN    := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes
CFLAGS  := -std=c11 -O2 -g -D_GNU_SOURCE $(WARN) -Iinclude -I$(LLHTTP_INC) -MMD -MP
LDLIBS  := -lm
ifeq ($(SANITIZE),1)
  CFLAGS  += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# The SQS endpoint (src/sqs/, docs/sqs.md): the wire protocols, SigV4, the actions.
# (Set before LIB_SRC: its := expands them where it stands.)
SQS_CODEC_SRC := sqs/errors sqs/decode sqs/shapes sqs/encode sqs/attributes
SQS_AUTH_SRC := sqs/sigv4 sqs/roles
SQS_FACE_SRC := sqs/listener sqs/actions sqs/params sqs/names sqs/queues sqs/admin sqs/messages sqs/moves
# Modules shared by the daemon and the tests (everything but main).
LIB_SRC := alloc buf utf8 hex log config keys shards json jsonw problem policy http http_write router redis redis_transport cluster backend store store_settings store_moves store_shards store_redrive store_enqueue store_replies shard_admin shard_view shard_stats shard_list shard_round queue_lines enqueue_lines \
           registry lost_claims fanout replay queue_clear durability coalesce waiters keyed_hash metrics auth tokens ui \
           webhook alerts redrive dlq moves \
           message request request_policy api api_policy api_groups api_auth api_respond api_batch enqueue_chunks promoter handback \
           $(SQS_CODEC_SRC) $(SQS_AUTH_SRC) $(SQS_FACE_SRC)
LIB_OBJ := $(LIB_SRC:%=$(BUILD)/%.o) $(BUILD)/lua_library.o $(BUILD)/ui_assets.o $(BUILD)/openapi_doc.o \
           $(BUILD)/llhttp/llhttp.o $(BUILD)/llhttp/api.o $(BUILD)/llhttp/http.o

UNIT_TESTS := test_keys test_router test_request test_request_groups test_message test_jsonw test_config test_problem test_metrics \
              test_coalesce test_sqs_sigv4 test_sqs_codec test_sqs_names test_keyed_hash test_shards
# test_lua_*, test_e2e_* and test_faults_* share tests/lua_support.h, e2e_common.h, faults_common.h.
LUA_TESTS := test_lua_messages test_lua_batch test_lua_queue_ops test_lua_settle test_lua_schedule test_lua_records test_lua_upgrade \
             test_lua_policy test_lua_history test_lua_dead_letters test_lua_keys test_lua_expiry \
             test_lua_groups test_lua_moves
E2E_TESTS := test_e2e_routes test_e2e_lifecycle test_e2e_settle test_e2e_policy test_e2e_links test_e2e_dlq \
             test_e2e_groups test_e2e_tokens test_e2e_sqs test_e2e_batch test_e2e_shards
FAULTS_TESTS := test_faults_http test_faults_redis test_faults_crash
INTEG_TESTS := test_http $(LUA_TESTS) $(E2E_TESTS) test_ops test_multi $(FAULTS_TESTS) test_cluster test_alerts
# The in-process suites: real modules on a real loop (tests/unit_support.h).
INTEG_TESTS += test_redis test_store test_waiters test_promoter test_alerts_unit
SHELL_UNIT := fuzz_smoke.sh deps_test.sh
# openapi_check.sh validates the responses the suites before it received: keep it last.
SHELL_INTEG := retryctl_test.sh tls_test.sh ui_test.sh bench_smoke.sh examples_test.sh sqs_clients_test.sh sqs_faults_test.sh openapi_check.sh
TEST_BINS := $(UNIT_TESTS:%=$(BUILD)/tests/%) $(INTEG_TESTS:%=$(BUILD)/tests/%)

.PHONY: all deps test-deps bench-deps run test unit bench lint clean fuzz
all: deps $(BUILD)/retryd

deps:
	@scripts/deps.sh

# What only the tests need: valgrind, chromium, and node + npm when there is none.
test-deps:
	@scripts/deps.sh test

# The bench's peers (docs/benchmarks.md): Sidekiq, wrk, and node + npm when there is none.
bench-deps:
	@scripts/deps.sh bench

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

# The web console: ui/* embedded as static assets.
$(BUILD)/ui_assets.c: $(wildcard ui/*) scripts/embed_ui.sh
	@mkdir -p $(@D)
	scripts/embed_ui.sh ui > $@

$(BUILD)/ui_assets.o: $(BUILD)/ui_assets.c include/retryd/ui.h
	$(CC) -std=c11 -Iinclude -c -o $@ $<

# The OpenAPI document, served at GET /openapi.json: docs/openapi.json as is.
$(BUILD)/openapi_doc.c: docs/openapi.json scripts/embed.sh
	@mkdir -p $(@D)
	scripts/embed.sh rd_openapi_json $< > $@

$(BUILD)/openapi_doc.o: $(BUILD)/openapi_doc.c
	$(CC) -std=c11 -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -Wno-unused-parameter -o $@ $< $(LIB_OBJ) \
	    $(LDFLAGS) $(PKG_LIBS) -lcmocka $(LDLIBS)

# test_coalesce stands in for the store's settle_claim (tests/test_coalesce.c).
$(BUILD)/tests/test_coalesce: LDFLAGS += -Wl,--wrap=rd_store_settle_claim
# test_waiters stands in for the HTTP exchange a parked claim watches.
$(BUILD)/tests/test_waiters: LDFLAGS += -Wl,--wrap=rd_http_exchange_client_alive

run: all
	scripts/run.sh $(BUILD)/retryd

# libFuzzer over the request path and the SQS codec (clang). `make fuzz` runs
# FUZZ_SECONDS (600) each; `make test` runs tests/fuzz_smoke.sh for about a minute.
FUZZ_DIR := build/fuzz
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_SRC := $(LIB_SRC:%=src/%.c) $(BUILD)/lua_library.c $(BUILD)/ui_assets.c $(BUILD)/openapi_doc.c \
            $(LLHTTP_SRC)/llhttp.c $(LLHTTP_SRC)/api.c $(LLHTTP_SRC)/http.c
FUZZ_SECONDS ?= 600

$(FUZZ_DIR)/fuzz_request: tests/fuzz_request.c $(FUZZ_SRC) $(wildcard include/retryd/*.h)
	@mkdir -p $(@D)
	clang -std=c11 -D_GNU_SOURCE $(FUZZ_FLAGS) -Iinclude -I$(LLHTTP_INC) $(PKG_CFLAGS) \
	    -o $@ tests/fuzz_request.c $(FUZZ_SRC) $(PKG_LIBS) -lm

# The SQS codec alone (tests/fuzz_sqs.c): decode, both encoders, the packer.
FUZZ_SQS_SRC := $(SQS_CODEC_SRC:%=src/%.c) src/alloc.c src/buf.c src/utf8.c src/hex.c src/json.c

$(FUZZ_DIR)/fuzz_sqs: tests/fuzz_sqs.c $(FUZZ_SQS_SRC) $(wildcard include/retryd/*.h include/retryd/sqs/*.h)
	@mkdir -p $(@D)
	clang -std=c11 -D_GNU_SOURCE $(FUZZ_FLAGS) -Iinclude $(PKG_CFLAGS) \
	    -o $@ tests/fuzz_sqs.c $(FUZZ_SQS_SRC) $(PKG_LIBS) -lm

fuzz: deps $(FUZZ_DIR)/fuzz_request $(FUZZ_DIR)/fuzz_sqs
	FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz_smoke.sh

test: all test-deps $(TEST_BINS) $(BUILD)/retryd.lua $(FUZZ_DIR)/fuzz_request $(FUZZ_DIR)/fuzz_sqs \
      $(BUILD)/loadgen
	BUILD=$(BUILD) scripts/test.sh $(UNIT_TESTS) $(SHELL_UNIT) -- $(INTEG_TESTS) $(SHELL_INTEG)

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	    --suppress=missingIncludeSystem -Iinclude src

clean:
	rm -rf build

-include $(wildcard $(BUILD)/*.d $(BUILD)/sqs/*.d $(BUILD)/tests/*.d)

# ---- bench (docs/benchmarks.md) ----
# make bench [QUICK=1]: scripts/bench.sh starts its own redis-server and retryd
# on free ports, runs redis-benchmark, build/loadgen (bench/loadgen.c) and the
# BullMQ peer (bench/, npm) against them and prints the tables recorded in
# docs/benchmarks.md. Full: under 10 minutes on 2 cores; QUICK=1: under 2.
QUICK ?= 0

$(BUILD)/loadgen: bench/loadgen.c $(BUILD)/llhttp/llhttp.o $(BUILD)/llhttp/api.o \
                  $(BUILD)/llhttp/http.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(filter %.o,$^) $(LDFLAGS) $(PKG_LIBS) $(LDLIBS)

bench: all bench-deps $(BUILD)/loadgen $(BUILD)/retryd.lua
	BUILD=$(BUILD) QUICK=$(QUICK) scripts/bench.sh
# ---- end bench ----
