# syntax=docker/dockerfile:1
# One image for every role of task-scheduler; the command picks it:
#   api | worker | migrate | keys create --tenant T [--admin]
# (`dev` runs the embedded stack and is not meant for containers.)
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml ./
COPY cli ./cli
COPY api ./api
COPY worker ./worker
COPY workflows ./workflows
COPY activities ./activities
COPY outbound ./outbound
COPY store ./store
COPY scheduling ./scheduling
COPY config ./config
RUN /opt/venv/bin/pip install .

FROM ${PYTHON_IMAGE} AS runtime
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it and volumes can match it.
RUN groupadd --system --gid 10001 scheduler \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin scheduler
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SCHEDULER_ENV=production \
    SCHEDULER_LOG_FORMAT=json \
    SCHEDULER_API_HOST=0.0.0.0 \
    SCHEDULER_API_PORT=8000 \
    SCHEDULER_WORKER_METRICS_PORT=9464
WORKDIR /app
USER 10001:10001
EXPOSE 8000 9464
ENTRYPOINT ["task-scheduler"]
CMD ["api"]
