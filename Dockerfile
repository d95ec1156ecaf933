# One image for every provnet container: the three nodes and the runner of
# docker-compose.yml. The entrypoint is the same `provnet` console script the
# local cluster runs; a container is configured by the same PROVNET_*
# variables as a local node (see docs/cluster.md).
#
# BASE_IMAGE is any image with python3 (>= 3.11) and its venv module: the
# official python image by default, or a Debian base built from Debian's own
# packages where no image registry is reachable (scripts/compose-check.sh
# builds one: debootstrap + docker import). The project is installed into a
# venv at /opt/venv, because a distribution's python is "externally managed"
# (PEP 668) and refuses a system-wide pip install.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Package-index settings for the pip install below, empty = pip's defaults.
# Passed by scripts/compose-check.sh from the host's own pip configuration;
# they end up in the image's build history, so never put credentials here.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROVNET_LOG_FORMAT=json \
    PROVNET_HOME=/data/home \
    GRPC_VERBOSITY=NONE \
    MPLCONFIGDIR=/tmp/matplotlib \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

WORKDIR /src
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY nodes ./nodes
COPY harness ./harness
RUN [ -n "$PIP_INDEX_URL" ] || unset PIP_INDEX_URL; \
    [ -n "$PIP_EXTRA_INDEX_URL" ] || unset PIP_EXTRA_INDEX_URL; \
    [ -n "$PIP_TRUSTED_HOST" ] || unset PIP_TRUSTED_HOST; \
    python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install . \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin provnet \
 && mkdir -p /data/home \
 && chown -R provnet:provnet /data

# Named volumes mounted at /data start with this owner and mode.
VOLUME ["/data"]
USER provnet
WORKDIR /data
EXPOSE 50051
# Lets scripts/compose-check.sh prune the untagged images earlier builds left.
LABEL org.opencontainers.image.title=provnet

ENTRYPOINT ["provnet"]
CMD ["node"]
