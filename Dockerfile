# HealthBench as an OpenReward environment server (see docs/deploy.md).
#   docker build -t healthbench .
#   docker run --rm -p 8080:8080 healthbench
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
# Listens on $PORT. Append `--subset hard --subset consensus` to serve those as splits of their own.
CMD ["healthbench", "serve", "--subset", "full", "--host", "0.0.0.0"]
