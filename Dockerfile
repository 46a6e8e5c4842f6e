# riskrank's gateway in a container: `riskrank mcp` over streamable HTTP, with the mcp, console,
# teams and ops (metrics, traces) extras and the bundled model (all-MiniLM-L6-v2 and
# riskrank-base ship inside the installed packages), run by a user without privileges. Two stages: the first installs into a
# virtual environment; the second copies only that environment onto a fresh slim Python, so
# the final image has no pip, no source tree and no package caches. Every dependency comes as
# a wheel: no compiler is needed in either stage.
#
#   docker build -t riskrank .
#   docker run --rm -p 8080:8080 -e RISKRANK_TOKEN=... -v ./deploy/config:/etc/riskrank:ro riskrank
#
# docs/serving.md#a-container says what the entry point reads; deploy/compose.yaml adds PostgreSQL.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# PyTorch's CPU build (a dependency of the training code; the servers never import it): from
# PyTorch's own index, so pip does not take PyPI's multi-GB CUDA build. Empty: PyPI only.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# A directory or URL of wheels to prefer (a mirror); empty: none.
ARG WHEELS=
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN python3 -m venv /opt/riskrank \
 && /opt/riskrank/bin/pip install ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} ${WHEELS:+--find-links "$WHEELS"} \
        -c constraints.txt ".[mcp,console,teams,ops]" \
 && /opt/riskrank/bin/pip uninstall -y pip

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 riskrank \
 && useradd --uid 10001 --gid riskrank --no-log-init --home-dir /var/lib/riskrank --create-home --shell /usr/sbin/nologin riskrank \
 && mkdir -p /etc/riskrank
COPY --from=build /opt/riskrank /opt/riskrank
COPY deploy/entrypoint.sh /usr/local/bin/riskrank-entrypoint
ENV PATH=/opt/riskrank/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    RISKRANK_CACHE=/var/lib/riskrank/cache \
    PYTHONUNBUFFERED=1
USER riskrank
WORKDIR /var/lib/riskrank
# Rank once at build time: proves the model loads offline, and leaves the encoder's ONNX graphs in
# the cache (the float32 one the tools are encoded with, the int8 one the servers encode tasks
# with), so the first start builds neither.
RUN riskrank retrieve "read a text file" -k 3 >/dev/null \
 && python3 -c "from riskrank.encoder import make_encoder; make_encoder(query_weights='int8').warm()"
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('RISKRANK_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["riskrank-entrypoint"]
CMD ["gateway"]
