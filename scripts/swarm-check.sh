#!/usr/bin/env bash
# The cluster as a Docker Swarm stack end to end, on a machine that may have
# no Docker yet (docs/cluster.md, "Docker Swarm"):
#
#   1. the engine, dockerd and a base image as scripts/compose-check.sh gets
#      them (its steps 1, 3 and 4; Compose v2 is not needed: `docker stack`
#      is part of the docker CLI);
#   2. `docker build` of provnet:local;
#   3. `docker swarm init --advertise-addr $PROVNET_SWARM_ADVERTISE` only
#      when this engine is in no swarm (then it leaves it at the end);
#   4. the operator key made in the results folder (a one-off container),
#      handed to the stack as Swarm secrets;
#   5. `docker stack deploy -c docker-stack.yml`: three node services and the
#      runner (waits for the nodes' health, smoke test, boundary default
#      slice on the node services, with in-process fingerprints), writing
#      into $PROVNET_SWARM_RESULTS (bind mount, default ./results-swarm);
#   6. waits, bounded, for the runner's task to end; its log and exit;
#   7. `docker stack rm`, always (trap), waiting until its containers and
#      network are gone, then its volumes; `docker swarm leave --force` if
#      step 3 created the swarm.
#
# Exit status: 0 when the runner's task completed (smoke test and boundary
# passed), 1 when it failed, 2 when a prerequisite cannot be set up.
#
# Settings (environment):
#   PROVNET_SWARM_STACK      stack name (provnet-check-<pid>)
#   PROVNET_SWARM_RESULTS    results folder on the host (./results-swarm)
#   PROVNET_SWARM_ADVERTISE  address for `swarm init` (127.0.0.1)
#   PROVNET_SWARM_TIMEOUT_S  bound on build and on the runner (1500)
#   PROVNET_SWARM_NODES      node services, e.g. a,b,c,d,e (default: docker-stack.yml's
#                            a,b,c); the stack file is then made for them by
#                            scripts/stack_file.py --names, run in the image
#   PROVNET_SWARM_TLS        1: TLS between the services (docker-stack.tls.yml, or
#                            stack_file.py --tls with PROVNET_SWARM_NODES); the
#                            cluster CA and a certificate per node service are
#                            made in $PROVNET_SWARM_RESULTS/tls first
#   PROVNET_BASE_IMAGE, PROVNET_COMPOSE_TOOLS as for compose-check.sh
set -euo pipefail

CHECK_NAME=swarm-check
# shellcheck source=scripts/compose-check.sh
source "$(dirname "${BASH_SOURCE[0]}")/compose-check.sh"

STACK=${PROVNET_SWARM_STACK:-provnet-check-$$}
SWARM_RESULTS=${PROVNET_SWARM_RESULTS:-$REPO/results-swarm}
ADVERTISE=${PROVNET_SWARM_ADVERTISE:-127.0.0.1}
SWARM_TIMEOUT=${PROVNET_SWARM_TIMEOUT_S:-1500}
IMAGE=provnet:local
NODES=${PROVNET_SWARM_NODES:-a,b,c}
TLS=${PROVNET_SWARM_TLS:-0}
STACK_FILE=$REPO/docker-stack.yml
[ "$TLS" = 1 ] && STACK_FILE=$REPO/docker-stack.tls.yml

CREATED_SWARM=0
GWBRIDGE_BEFORE=1
DEPLOYED=0

stack_gone() {
    [ -z "$(docker ps -a -q --filter "label=com.docker.stack.namespace=$STACK")" ] \
        && [ -z "$(docker network ls -q --filter "label=com.docker.stack.namespace=$STACK")" ]
}

swarm_teardown() {
    local status=$?
    remove_rootfs
    if [ "$DEPLOYED" -eq 1 ]; then
        log "removing stack $STACK"
        timeout 120 docker stack rm "$STACK" >/dev/null 2>&1 \
            || log "warning: 'docker stack rm $STACK' failed"
        local i
        for i in $(seq 90); do
            stack_gone && break
            sleep 2
        done
        stack_gone || log "warning: containers or network of $STACK still there after 180 s"
        local volumes
        volumes=$(docker volume ls -q --filter "label=com.docker.stack.namespace=$STACK")
        if [ -n "$volumes" ]; then
            # shellcheck disable=SC2086  # one volume name per word
            docker volume rm $volumes >/dev/null || log "warning: could not remove volumes: $volumes"
        fi
    fi
    if [ "$CREATED_SWARM" -eq 1 ]; then
        log "leaving the swarm this check created"
        timeout 60 docker swarm leave --force >/dev/null 2>&1 \
            || log "warning: 'docker swarm leave --force' failed"
        # `swarm init` makes the bridge to the overlay networks; leaving keeps it
        if [ "$GWBRIDGE_BEFORE" -eq 0 ]; then
            docker network rm docker_gwbridge >/dev/null 2>&1 \
                || log "warning: could not remove the network docker_gwbridge"
        fi
    fi
    if [ ${#TIMINGS[@]} -gt 0 ]; then
        log "timings: $(IFS=';'; echo "${TIMINGS[*]}")"
    fi
    exit "$status"
}

ensure_swarm() {
    local state
    state=$(docker info --format '{{.Swarm.LocalNodeState}}')
    if [ "$state" = active ]; then
        log "engine already in a swarm: deploying there (and staying in it)"
        return
    fi
    phase "docker swarm init --advertise-addr $ADVERTISE"
    docker network inspect docker_gwbridge >/dev/null 2>&1 || GWBRIDGE_BEFORE=0
    timeout 60 docker swarm init --advertise-addr "$ADVERTISE" >/dev/null \
        || die "docker swarm init --advertise-addr $ADVERTISE failed"
    CREATED_SWARM=1
    phase_done swarm-init
}

build_image() {
    local index extra trusted
    index=$(pip_setting index-url PIP_INDEX_URL)
    extra=$(pip_setting extra-index-url PIP_EXTRA_INDEX_URL)
    trusted=$(pip_trusted_hosts)
    log "pip in the build: index ${index:-<pip default>}; extra ${extra:-<none>}"
    phase "building $IMAGE on $BASE"
    timeout "$SWARM_TIMEOUT" docker build -q -t "$IMAGE" --build-arg "BASE_IMAGE=$BASE" \
        --build-arg "PIP_INDEX_URL=$index" --build-arg "PIP_EXTRA_INDEX_URL=$extra" \
        --build-arg "PIP_TRUSTED_HOST=$trusted" "$REPO" >/dev/null \
        || die "docker build failed (run it by hand to see why)"
    docker image prune -f --filter label=org.opencontainers.image.title=provnet >/dev/null \
        || log "warning: could not prune untagged provnet images"
    phase_done build
}

make_operator_key() {
    # Made by the results folder's owner, as Compose's operator-key service does.
    docker run --rm --user "$(id -u):$(id -g)" -v "$SWARM_RESULTS:/results" \
        --entrypoint sh "$IMAGE" -c \
        'test -f /results/operator.key || provnet keys new /results/operator.key >/dev/null;
         provnet keys show /results/operator.key | sed -n "s/^node_id //p" > /results/operator.pub' \
        || die "could not make the operator key in $SWARM_RESULTS"
    [ -s "$SWARM_RESULTS/operator.pub" ] || die "$SWARM_RESULTS/operator.pub is empty"
}

make_tls_files() {
    # The cluster CA (tls/ca) and a certificate per node service naming the
    # service, by the results folder's owner; the stack hands them out as secrets.
    docker run --rm --user "$(id -u):$(id -g)" -v "$SWARM_RESULTS:/results" \
        -e "NODES=${NODES//,/ }" --entrypoint sh "$IMAGE" -euc \
        'for node in $NODES; do
           provnet tls new --ca /results/tls/ca --node "$node" --host "$node" \
             --out "/results/tls/$node" >/dev/null
         done' \
        || die "could not make the TLS files in $SWARM_RESULTS/tls"
    log "TLS: CA $SWARM_RESULTS/tls/ca/ca.pem, a certificate per node service"
}

# The runner's task state: running, complete, failed, ... (empty before it exists).
runner_state() {
    docker service ps "${STACK}_runner" --no-trunc --format '{{.CurrentState}}|{{.Error}}' \
        2>/dev/null | head -n 1
}

swarm_main() {
    local t0
    t0=$(date +%s)
    trap swarm_teardown EXIT
    trap 'exit 130' INT TERM
    ensure_engine
    ensure_daemon
    choose_base
    build_image
    ensure_swarm

    mkdir -p "$SWARM_RESULTS"
    SWARM_RESULTS=$(cd "$SWARM_RESULTS" && pwd)
    make_operator_key
    local tls_flag=()
    if [ "$TLS" = 1 ]; then
        make_tls_files
        tls_flag=(--tls)
    fi
    export PROVNET_RESULTS_DIR=$SWARM_RESULTS PROVNET_UID=$(id -u) PROVNET_GID=$(id -g)
    if [ -n "${PROVNET_SWARM_NODES:-}" ]; then
        STACK_FILE=$SWARM_RESULTS/docker-stack.yml
        log "stack file for nodes $NODES: $STACK_FILE"
        docker run --rm -v "$REPO/scripts:/scripts:ro" \
            -v "$REPO/docker-compose.yml:/docker-compose.yml:ro" \
            -v "$REPO/docker-compose.tls.yml:/docker-compose.tls.yml:ro" \
            --entrypoint python3 "$IMAGE" /scripts/stack_file.py --compose /docker-compose.yml \
            --names "$NODES" "${tls_flag[@]}" >"$STACK_FILE" \
            || die "scripts/stack_file.py --names $NODES ${tls_flag[*]} failed"
    fi

    phase "docker stack deploy $STACK (results: $SWARM_RESULTS)"
    DEPLOYED=1
    timeout 300 docker stack deploy --detach=true --prune -c "$STACK_FILE" "$STACK" \
        >"$SWARM_RESULTS/stack-deploy.log" 2>&1 \
        || { cat "$SWARM_RESULTS/stack-deploy.log" >&2; die "docker stack deploy failed"; }
    phase_done deploy

    phase "waiting for the runner (at most $SWARM_TIMEOUT s)"
    local state="" deadline=$(( $(date +%s) + SWARM_TIMEOUT ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        state=$(runner_state)
        case $state in
            Complete*|Failed*|Rejected*|Shutdown*|Orphaned*) break ;;
            *) sleep 3 ;;
        esac
    done
    phase_done run
    timeout 120 docker service logs --raw "${STACK}_runner" >"$SWARM_RESULTS/runner.log" 2>&1 || true
    local svc
    for svc in ${NODES//,/ }; do
        timeout 60 docker service logs --raw "${STACK}_$svc" >"$SWARM_RESULTS/node-$svc.log" 2>&1 \
            || true
    done
    grep -h '"expected"' "$SWARM_RESULTS/runner.log" >&2 || true
    grep -h -E '^(smoke|boundary|fingerprint|runs deciding|cost table|[|]|evidence|runner)' \
        "$SWARM_RESULTS/runner.log" >&2 || true
    TIMINGS+=("total $(( $(date +%s) - t0 )) s")
    case $state in
        Complete*) log "ok: runner task $state; results in $SWARM_RESULTS" ;;
        "") log "the runner task never appeared"; return 1 ;;
        Failed*|Rejected*|Shutdown*|Orphaned*)
            tail -n 40 "$SWARM_RESULTS/runner.log" >&2
            log "runner task ended: $state"
            return 1
            ;;
        *)
            tail -n 40 "$SWARM_RESULTS/runner.log" >&2
            log "runner task not done after $SWARM_TIMEOUT s: $state"
            return 1
            ;;
    esac
}

swarm_main "$@"
