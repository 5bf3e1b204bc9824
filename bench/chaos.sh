#!/usr/bin/env bash
# The chaos soak from one command (itests/soak_chaos.py): a streaming
# exactly-once job with user state and a GroupByKey as 3 copies on a broker
# of its own, for SECS seconds (default 600) with a copy SIGKILLed every ~20 s
# and the broker SIGKILLed and restarted 3 times (down 5-30 s); then checks
# that nothing was lost or duplicated. Prints the summary as JSON.
#   bench/chaos.sh [SECS]
# Environment: BEAM_KAFKA_CHAOS_SEED (the plan's random seed),
# BEAM_KAFKA_CHAOS_REPORT (also write the summary to this file),
# BEAM_KAFKA_CHAOS_GROUP_PROTOCOL=consumer (copies hand tasks over incrementally, KIP-848),
# BEAM_KAFKA_CHAOS_STANDBYS=R (--num_standby_replicas=R).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
export BEAM_KAFKA_CHAOS_SECS="${1:-600}"
"$REPO_ROOT/scripts/setup.sh"
"$REPO_ROOT/scripts/build.sh" >/dev/null
PY="$("$REPO_ROOT/scripts/python-env.sh")"
"$REPO_ROOT/scripts/kafka.sh" fetch
limit=$(( ${BEAM_KAFKA_CHAOS_SECS%.*} + 900 ))
cd "$REPO_ROOT"
BEAM_KAFKA_ITEST_TIMEOUT="$limit" "$PY" -m pytest itests/soak_chaos.py -s -q -p no:cacheprovider
