# twinmq make targets. `make test` is what CI runs (see .ci/run).
SHELL     := bash
.SHELLFLAGS := -o pipefail -c
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 2s

.PHONY: all test vet lint race fmt-check example example-consumer example-migration example-fleet bench-store bench-wire bench-produce bench-consume bench-delay proto interop fuzz fleet chaos dial-check

# Modules of their own under contrib/ (kept out of the core's dependencies);
# make test vets and tests each of them too.
CONTRIB := contrib/etcd contrib/otel

all: test

# vet + the whole suite with the race detector, core module then each
# contrib module. This is the README's test command.
test: vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	@set -e; for m in $(CONTRIB); do echo "== $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 10m ./...); done

# golangci-lint (configuration in .golangci.yml), pinned and run with go run
# so nothing is installed; core module then each contrib module.
LINT_VERSION := v2.15.0
LINT         := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(LINT_VERSION)

lint:
	$(LINT) run ./...
	@set -e; for m in $(CONTRIB); do echo "== $$m"; (cd $$m && $(LINT) run --config $(CURDIR)/.golangci.yml ./...); done

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@set -e; for m in $(CONTRIB); do (cd $$m && $(GO) vet ./...); done

# The main job: a producer against the embedded two-cluster broker. It
# prints the average batch (messages against requests), the clusters'
# shares against their weights, and a failover while one cluster is down.
example:
	$(GO) run ./examples/producer

# Lane routing: three consumers of one group (base, gray, gray.canary) and
# which of them handled each message, received or forwarded.
example-consumer:
	$(GO) run ./examples/consumer

# A logic topic moved live from a 4.x cluster over remoting to a 5.x
# cluster over gRPC, by weights published as new configuration versions;
# delayed messages go only to the cluster with a timer.
example-migration:
	$(GO) run ./examples/migration

# Every benchmark target pipes its run through internal/benchfig, which
# prints one FIGURE line per figure (the median when a figure is reported
# more than once) and fails the target when a figure of its -want list is
# missing.
comma := ,
empty :=
space := $(empty) $(empty)
want   = -want '$(subst $(space),$(comma),$(strip $(1)))'

# A fleet on etcd: consumer processes in lanes a.x, a and base, one per
# process, found through the etcd registry, plus a producer; each message
# is traced to its lane. Shows the lane failover when a process is killed.
example-fleet:
	cd contrib/etcd && $(GO) run ./examples/fleet

# The fleet run three times at 100 messages per second per lane: SIGKILL
# of the a.x process, its restart, a configuration published to etcd;
# ends with FIGURE fleet_lane_failover_ms, fleet_config_apply_ms (medians),
# fleet_lost, fleet_handled_twice, fleet_misrouted (totals, all must be 0).
FLEET_RUNS ?= 3
fleet:
	cd contrib/etcd && $(GO) test -run '^$$' -bench '^BenchmarkFleet$$' -benchtime $(FLEET_RUNS)x -timeout 30m ./internal/fleet/ | (cd ../.. && $(GO) run ./internal/benchfig $(call want,fleet_lane_failover_ms fleet_config_apply_ms fleet_lost fleet_handled_twice fleet_misrouted fleet_acked_sends))

# The fault campaign (internal/chaos): two clusters of two broker
# processes (sync flush), each behind a fault proxy, under synchronous and
# batched asynchronous sends and a consumer group of two members, while
# CHAOS_FAULTS faults picked from CHAOS_SEED (printed; random when unset)
# hit them: kill -9 and restart, SIGSTOP/SIGCONT, partitions of a broker or
# a cluster, lost replies, latency, cut connections, several at once. Ends
# with FIGURE chaos_* lines; the run fails if an acknowledged send was lost.
# make test runs a short campaign of 50 faults. Also reports how long each
# fault kept the producer sending to a broker that could not answer
# (chaos_max_dead_target_ms, chaos_p50_dead_target_ms). CHAOS_INTERVAL sets
# the mean time between fault starts (default 400ms).
CHAOS_FAULTS ?= 1000
CHAOS_FIGURES := chaos_faults chaos_faults_kill9 chaos_faults_sigstop chaos_faults_partition chaos_faults_reply_lost \
	chaos_acked_sends chaos_acked_lost chaos_duplicates chaos_duplicate_rate chaos_max_caller_wait_ms \
	chaos_max_dead_target_ms chaos_p50_dead_target_ms
chaos:
	CHAOS_FAULTS=$(CHAOS_FAULTS) $(GO) test -run '^$$' -bench '^BenchmarkChaos$$' -benchtime 1x -timeout 30m ./internal/chaos/ | $(GO) run ./internal/benchfig $(call want,$(CHAOS_FIGURES))

# Storage-core benchmarks; ends with one FIGURE line per figure.
STORE_FIGURES := disk_seq_write_mb_s store_append_async_mb_s store_sync_1_msgs_s store_sync_64_msgs_s \
	store_append_msgs_s store_dispatch_msgs_s store_16q_msgs_s store_10000q_msgs_s cq_lookup_ns batchcq_lookup_ns
bench-store:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./internal/store/ | $(GO) run ./internal/benchfig $(call want,$(STORE_FIGURES))

# Producer: synchronous Send of 1 KB messages from 1, 16 and 64 senders,
# batched and unbatched, against the embedded two-cluster broker, plus the
# single-threaded failover picker; ends with one FIGURE line per figure.
# The produce figures are medians of 25 alternating rounds per mode, each
# PRODUCE_ROUND of wall time (a shared machine makes single rounds swing by
# a tenth or more). failover_picks_s is picks per wall-clock second of one
# goroutine over five healthy resources (the sub-benchmark n=5 alone).
PRODUCE_ROUND ?= 200ms
PRODUCE_FIGURES := $(foreach c,1 16 64,$(foreach m,batched unbatched,produce_$(m)_c$(c)_msgs_s produce_$(m)_c$(c)_p99_ms)) \
	failover_picks_s
bench-produce:
	{ PRODUCE_ROUND=$(PRODUCE_ROUND) $(GO) test -run '^$$' -bench '^BenchmarkProduce$$' -benchtime 1x -timeout 10m ./producer/ && \
	  $(GO) test -run '^$$' -bench '^BenchmarkPick$$/^n=5$$' -benchtime $(BENCHTIME) ./failover/ ; } | $(GO) run ./internal/benchfig $(call want,$(PRODUCE_FIGURES))

# Consumption against the embedded brokers, runs of fixed size: produce
# and consume at once (e2e_*: the produce rate caps the consume rate), lane
# forwarding latency (forward_*), and the consumer's capacity alone, two
# consumers draining a topic filled beforehand (drain_consume_msgs_s).
CONSUME_FIGURES := e2e_produce_msgs_s e2e_consume_msgs_s forward_p50_ms forward_p99_ms drain_consume_msgs_s
bench-consume:
	$(GO) test -run '^$$' -bench '^(BenchmarkE2E|BenchmarkDrain)$$' -benchtime 1x -timeout 10m ./consumer/ | $(GO) run ./internal/benchfig $(call want,$(CONSUME_FIGURES))

# Wire benchmark: driver -> embedded broker over gRPC, 1 KiB messages, one
# message and batches of 32 per request, 64 concurrent callers, one run; ends
# with FIGURE wire_send_1_msgs_s and FIGURE wire_send_32_msgs_s.
bench-wire:
	$(GO) test -run '^$$' -bench '^BenchmarkWireSend$$' -benchtime $(BENCHTIME) -count 1 ./internal/wiresuite/ | $(GO) run ./internal/benchfig $(call want,wire_send_1_msgs_s wire_send_32_msgs_s)
	$(GO) test -run '^$$' -bench '^BenchmarkRemotingSend$$' -benchtime $(BENCHTIME) -count 1 ./internal/remoting/remotingsuite/ | $(GO) run ./internal/benchfig $(call want,wire_remoting_send_1_msgs_s wire_remoting_send_32_msgs_s)

# Delayed messages: 10,000 with random delays up to 10 s, on the wall
# clock. First the timer store alone (due time to the append into the real
# topic: delay_timer_p99_late_ms), then the whole path, driver send to an
# embedded broker and long-polling consumers (delivery time to receive);
# ends with FIGURE delay_p99_late_ms (99th percentile lateness; a run with
# an early or duplicate delivery fails).
bench-delay:
	{ $(GO) test -run '^$$' -bench '^BenchmarkDelayLateness$$' -benchtime 1x -timeout 5m ./internal/broker/timer/ && \
	  $(GO) test -run '^$$' -bench '^BenchmarkDelayEndToEnd$$' -benchtime 1x -timeout 5m ./embedded/ ; } | $(GO) run ./internal/benchfig $(call want,delay_timer_p99_late_ms delay_p99_late_ms)

# The dial test against the embedded brokers: two clusters of two brokers,
# 20 probes a second to each (normal, delayed, transactional), a 1 s
# reconciliation period; one broker paused per run, DIAL_RUNS runs. Ends with
# FIGURE dial_detect_ms (pause to the paused broker's first report, mean of
# the runs) and FIGURE dial_false_alarms (reports on the healthy brokers,
# all runs; must be 0: the benchmark fails otherwise).
DIAL_RUNS ?= 3
dial-check:
	$(GO) test -run '^$$' -bench '^BenchmarkDialPause$$' -benchtime $(DIAL_RUNS)x -timeout 10m ./internal/dial/ | $(GO) run ./internal/benchfig $(call want,dial_detect_ms dial_false_alarms)

# Every fuzz target, FUZZTIME each (go test -fuzz takes one target at a time).
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./internal/store:FuzzDecodeRecord ./internal/store:FuzzDecodeCQEntry \
	./internal/driver:FuzzParseMessageID ./internal/driver:FuzzConvertMessage \
	./internal/driver:FuzzReadReceive ./internal/driver:FuzzNormalizeSend \
	./internal/driver:FuzzSendResponseDecode \
	./internal/broker:FuzzHandleRequests ./internal/broker:FuzzDecodeReceipt \
	./internal/broker:FuzzReceiveRequest ./internal/broker:FuzzValidateSend \
	./internal/broker:FuzzSendRequestDecode \
	./internal/broker/auth:FuzzParseAuthorization \
	./config:FuzzParse ./lane:FuzzParse \
	./internal/remoting/wire:FuzzDecodeFrame ./internal/remoting/wire:FuzzDecodeHeader \
	./internal/remoting/wire:FuzzDecodeMessageExts ./internal/remoting/wire:FuzzJSONHeaderFastPath \
	./internal/remoting:FuzzQuoteNumericKeys ./internal/remoting:FuzzPropertiesEncode

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== $$pkg $$fn"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done
	@echo "== contrib/etcd FuzzDecodeInstance"
	cd contrib/etcd && $(GO) test -run '^$$' -fuzz '^FuzzDecodeInstance$$' -fuzztime $(FUZZTIME) .

# Regenerate internal/pb from proto/ with pinned generators. The Go plugins are
# installed into .bin (git-ignored); protoc is Debian's protobuf-compiler.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTO_BIN                  := $(CURDIR)/.bin
MODULE                     := github.com/twinmq/twinmq

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(PROTO_BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(PROTO_BIN):$$PATH protoc -I proto \
	  --go_out=. --go_opt=module=$(MODULE) \
	  --go-grpc_out=. --go-grpc_opt=module=$(MODULE) \
	  proto/apache/rocketmq/v2/definition.proto proto/apache/rocketmq/v2/service.proto \
	  proto/twinmq/forward/v1/forward.proto
	$(GO) build ./internal/pb/...

# The interop suite against real Apache RocketMQ 5.4.0 and 4.9.7 brokers
# (fetched from Maven Central, run in a loopback-only network namespace;
# needs root or unprivileged user namespaces, Java 17+ and Maven), then the
# SDK produce benchmark against 5.4.0, then the send race over remoting
# against RocketMQ's Java client; ends with FIGURE
# interop_produce_{batched,unbatched}_c{16,64}_msgs_s and
# interop_{java_unbatched,java_autobatch,remoting_batched,remoting_unbatched}
# _c{16,64}_{msgs_s,p99_ms}. Modules are
# downloaded first: the namespace has no network. See interop/README.md.
interop:
	$(GO) mod download
	bash interop/run.sh bash interop/suite.sh
