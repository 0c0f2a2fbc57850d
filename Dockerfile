# One image for all six components; the chart picks the component with its args: `run <component> [flags]`.
#   docker build -t ghcr.io/kai-scheduler-py/kai-scheduler:0.1.0 .
#   kai dev image            (the local build: buildah on a Debian bookworm base made by mmdebstrap)
# BASE_IMAGE is any image with Python >= 3.11 and its venv module: an official Python image, or the local Debian
# base (python3, python3-venv). Everything is installed into a venv at /opt/kai, so the one recipe works on both
# (Debian's system Python refuses `pip install` outside a venv).
# Layers go from the least to the most often changed: a code change rebuilds only the last two.
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/kai PATH=/opt/kai/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN python3 -m venv /opt/kai \
 && groupadd --system --gid 10001 kai \
 && useradd --system --uid 10001 --gid kai --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kai
# The dependencies, keyed by pyproject.toml alone (the build backend too: the project layer builds offline).
COPY pyproject.toml /src/pyproject.toml
RUN python -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb")); \
print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"] + ["wheel"]))' > /src/requirements.txt \
 && pip install -r /src/requirements.txt
# The project itself. pip byte-compiles what it installs: the root filesystem is read-only at run time.
COPY README.md /src/README.md
COPY operators /src/operators
RUN pip install --no-deps --no-build-isolation /src && rm -rf /src
USER 10001:10001
WORKDIR /tmp
# Metrics / probes (8080, 8081) and the webhook servers (9443).
EXPOSE 8080 8081 9443
ENTRYPOINT ["kai"]
CMD ["run", "--help"]
