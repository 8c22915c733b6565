# The production image: one image for web, openenv, worker and beat (docker-compose.yml).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    STATIC_MANIFEST=true

RUN apt-get update \
 && apt-get install -y --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 app

WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY tau2site tau2site
COPY tau2_env tau2_env
COPY apps apps
RUN pip install -c constraints.txt ".[pypi]"
COPY . .
RUN DEBUG=true TAU2_VAR_DIR=/tmp/build python manage.py collectstatic --noinput \
 && mkdir -p /app/var && chown -R app:app /app/var

USER app
EXPOSE 8000 8001
# WEB_CONCURRENCY web processes (uvicorn --workers). One by default: several need REDIS_URL
# and PostgreSQL, which docker-compose.yml provides (it sets 2); see docs/operations.md, Production.
# uvicorn takes X-Forwarded-For only from FORWARDED_ALLOW_IPS (default 127.0.0.1,::1): set
# it to the TLS proxy's address, never '*' (any client could name its own address).
CMD ["sh", "-c", "python manage.py bootstrap && exec uvicorn tau2site.asgi:application --host 0.0.0.0 --port 8000 --workers \"${WEB_CONCURRENCY:-1}\" --proxy-headers"]
