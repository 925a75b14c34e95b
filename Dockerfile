# HealthBench as an OpenReward environment server (see docs/deploy.md).
#   docker build -t healthbench .
#   docker run --rm -p 127.0.0.1:8080:8080 healthbench       # this machine only; sessions bring their grader keys
#   docker run --rm -p 8080:8080 -e HEALTHBENCH_SERVER_TOKEN=... -e HEALTHBENCH_GRADER_API_KEY=... healthbench
# The server listens on every interface of the container: with a grader key of its own it needs a token
# (HEALTHBENCH_SERVER_TOKEN, which clients send as X-API-Key or Authorization: Bearer) or, behind a network that
# lets only your clients in (the OpenReward platform), HEALTHBENCH_NO_AUTH=1.
# The image holds the official HealthBench files: keep it in a private registry, since OpenAI asks that
# the examples not be posted online in plain text.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HEALTHBENCH_CACHE_DIR=/opt/healthbench \
    OPENREWARD_DISABLE_UPDATE_CHECK=1 \
    PORT=8080

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install ".[serve]"

# Downloaded and checked against their sha256 at build time, so the server starts in seconds without network.
RUN healthbench download full hard consensus && chmod -R a+rX "$HEALTHBENCH_CACHE_DIR"

USER nobody
EXPOSE 8080
# Listens on $PORT of every interface, as a published port needs. Append `--subset hard --subset consensus` to
# serve those as splits of their own.
CMD ["healthbench", "serve", "--subset", "full", "--host", "0.0.0.0"]
