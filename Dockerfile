# rightsize production image: slim Python, CPU-only torch, gunicorn, non-root.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# CPU build of torch first (the profiler uses the meta device; no CUDA is needed).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

COPY pyproject.toml README.md ./
COPY service ./service
COPY knowledge ./knowledge
COPY profiles ./profiles
RUN pip install . && useradd --system --uid 10001 --home /app rightsize

# the performance model's cache (operator mixes, interval quantiles: JSON), built here so
# that the container's first estimate does not wait about a minute for it
# what the service keeps (keys, the embedded store, submitted rows, refreshed prices) lives
# on /data: mount a volume there, or a restart of the container loses it
ENV RIGHTSIZE_MODEL_DIR=/app/models \
    RIGHTSIZE_KEYS_FILE=/data/keys.json \
    RIGHTSIZE_STORE_FILE=/data/store.sqlite3 \
    RIGHTSIZE_SUBMISSIONS_FILE=/data/submissions.jsonl \
    RIGHTSIZE_PRICES_FILE=/data/prices.csv
RUN mkdir -p /app/models /data && chown rightsize /app/models /data
VOLUME ["/data"]
USER rightsize
RUN rightsize train
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"

# Set RIGHTSIZE_REDIS_URL to use Redis (then 2 worker processes share it); without it the
# service runs one worker on its embedded store (/data/store.sqlite3). Each worker is an
# event loop that reads whole requests before a thread sees them (service/front): it is
# served directly, with nothing in front; behind a proxy, set RIGHTSIZE_PROXY_HOPS.
# gunicorn's settings: service/gunicorn_conf.py (compose.yaml adds Redis and an rq worker).
CMD ["rightsize", "serve", "--host", "0.0.0.0", "--port", "8000"]
