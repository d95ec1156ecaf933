# One image for every provnet container: the three nodes and the runner of
# docker-compose.yml. The entrypoint is the same `provnet` console script the
# local cluster runs; a container is configured by the same PROVNET_*
# variables as a local node (see docs/cluster.md).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROVNET_LOG_FORMAT=json \
    PROVNET_HOME=/data/home \
    GRPC_VERBOSITY=NONE

WORKDIR /src
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY nodes ./nodes
COPY harness ./harness
RUN pip install . \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin provnet \
 && mkdir -p /data/home \
 && chown -R provnet:provnet /data

# Named volumes mounted at /data start with this owner and mode.
VOLUME ["/data"]
USER provnet
WORKDIR /data
EXPOSE 50051

ENTRYPOINT ["provnet"]
CMD ["node"]
