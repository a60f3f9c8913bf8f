#!/bin/sh
# One-shot (temporalio/admin-tools image, or any shell with the `temporal` CLI): wait until the
# Temporal frontend is serving, create the namespace if it is missing, and register the custom
# search attributes that task workflows set (workflows/attributes.py), so operators can filter
# by them in the UI. Safe to re-run: an existing namespace or attribute is left as it is.
set -eu

: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS (host:port of the frontend) is required}"
NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
RETENTION="${TEMPORAL_NAMESPACE_RETENTION:-168h}"
ATTEMPTS="${TEMPORAL_SETUP_ATTEMPTS:-60}"
DELAY="${TEMPORAL_SETUP_DELAY_SECONDS:-2}"

# Run "$@" until it succeeds; the frontend and a new namespace become usable a little after
# the port opens (namespace registration is propagated through a cache).
retry() {
    attempt=1
    until "$@"; do
        if [ "$attempt" -ge "$ATTEMPTS" ]; then
            echo "temporal setup: gave up after ${ATTEMPTS} attempts: $*" >&2
            return 1
        fi
        attempt=$((attempt + 1))
        sleep "$DELAY"
    done
}

retry temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null

if temporal operator namespace describe --address "$TEMPORAL_ADDRESS" --namespace "$NAMESPACE" >/dev/null 2>&1; then
    echo "temporal setup: namespace ${NAMESPACE} exists"
else
    retry temporal operator namespace create --address "$TEMPORAL_ADDRESS" \
        --namespace "$NAMESPACE" --retention "$RETENTION"
fi

# One call per attribute: given several --name flags, this CLI registers only the first.
for attribute in TaskId:Keyword TenantId:Keyword TaskName:Keyword TaskStatus:Keyword \
                 ScheduleType:Keyword NextRunAt:Datetime; do
    retry temporal operator search-attribute create --address "$TEMPORAL_ADDRESS" \
        --namespace "$NAMESPACE" --name "${attribute%%:*}" --type "${attribute#*:}" >/dev/null
done
echo "temporal setup: namespace ${NAMESPACE} ready with the task search attributes"
