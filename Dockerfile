# One image for all six components; the chart picks the component with its args: `run <component> [flags]`.
#   docker build -t ghcr.io/kai-scheduler-py/kai-scheduler:0.1.0 .
# Stage 1 builds a wheel of this project (and of its dependencies); stage 2 installs them into a slim runtime.
ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY operators ./operators
RUN pip wheel --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels kai-scheduler-py \
 && groupadd --system --gid 10001 kai \
 && useradd --system --uid 10001 --gid kai --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kai
USER 10001:10001
WORKDIR /tmp
# Metrics / probes (8080, 8081) and the webhook servers (9443).
EXPOSE 8080 8081 9443
ENTRYPOINT ["kai"]
CMD ["run", "--help"]
