# The OpenEnv server image: `sandgym serve` inside a container, built from
# sandgym's own local images with no registry and no network during the
# build. Do not `docker build` this file by hand: `sandgym images build
# serve` prepares its context (the locked Python packages and
# sandgym, installed on the host into site/) and builds it with
# BASE=sandgym/base:python-bwrap-<hash> (bookworm + python3 + bubblewrap).
#
# Run (sessions' sandboxes are bubblewrap namespaces inside the container,
# which needs the user-namespace syscalls that Docker's default seccomp
# profile and masked /proc paths refuse):
#   docker run --rm --network host \
#     --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
#     sandgym/serve:<hash>                # serves on 127.0.0.1:8000
ARG BASE
FROM ${BASE}
COPY site /opt/sandgym/site
ENV PYTHONPATH=/opt/sandgym/site \
    PYTHONDONTWRITEBYTECODE=1 \
    SANDGYM_ENV=sandgym/CodeFunction-v0 \
    SANDGYM_RUNTIME=local
USER 1000:1000
WORKDIR /tmp
EXPOSE 8000
ENTRYPOINT ["python3", "-m", "sandgym"]
CMD ["serve", "--env", "sandgym/CodeFunction-v0", "--host", "127.0.0.1", "--port", "8000"]
