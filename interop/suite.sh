#!/usr/bin/env bash
# What `make interop` runs next to the real RocketMQ peer:
#
#   bash interop/run.sh bash interop/suite.sh
#
# run.sh starts the peer and runs this script inside its loopback-only
# network namespace, so nothing here may need the network: Go modules come
# from the module cache (the Makefile downloads them first) and
# internal/benchfig has no dependencies.
#
# Three steps, all always run:
#   1. the interop tests (build tag interop);
#   2. the SDK produce benchmark against the same peer, piped through
#      internal/benchfig, so the run ends with its FIGURE lines (and fails
#      when one of the four interop_produce_* figures is missing);
#   3. the send race over remoting, twinmq against RocketMQ's Java client
#      (interop/java, built by run.sh), the same way: it fails when one of
#      its sixteen figures (msgs/s and p99 of four sides at 16 and 64
#      senders) is missing. About 2.5 minutes.
# The exit status is non-zero when any step failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}

status=0

echo "== interop tests"
if ! "$GO" test -count=1 -tags interop -timeout 15m ./internal/interop/...; then
	echo "interop tests FAILED" >&2
	status=1
fi

# Each sub-benchmark runs for a fixed window whatever b.N is: one run each.
echo "== interop produce benchmark"
if ! "$GO" test -count=1 -tags interop -run '^$' -bench '^BenchmarkInteropProduce$' -benchtime 1x \
	-timeout 5m ./internal/interop/ | "$GO" run ./internal/benchfig \
	-want interop_produce_batched_c16_msgs_s,interop_produce_batched_c64_msgs_s,interop_produce_unbatched_c16_msgs_s,interop_produce_unbatched_c64_msgs_s; then
	echo "interop produce benchmark FAILED" >&2
	status=1
fi

# Each run of a side lasts a fixed time whatever b.N is: one run each. The
# figures are the medians of the rounds.
echo "== interop remoting race (twinmq against the Java client)"
race_want=
for side in java_unbatched java_autobatch remoting_batched remoting_unbatched; do
	for c in 16 64; do
		race_want+=interop_${side}_c${c}_msgs_s,interop_${side}_c${c}_p99_ms,
	done
done
if ! "$GO" test -count=1 -tags interop -run '^$' -bench '^BenchmarkInteropRemotingRace$' -benchtime 1x \
	-timeout 8m ./internal/interop/ | "$GO" run ./internal/benchfig -want "${race_want%,}"; then
	echo "interop remoting race FAILED" >&2
	status=1
fi

exit "$status"
