# The OpenEnv server image: sandgym's server inside a container, built from
# sandgym's own local images with no registry and no network during the
# build. Do not `docker build` this file by hand: `sandgym images build
# serve` prepares its context (sandgym, installed on the host into site/)
# and builds it with BASE=sandgym/serve-deps:<hash>, the locked Python
# packages (installed on the host too) on bookworm + python3
# (sandgym/serve_image.py).
#
# Run it like any OpenEnv image (openenv's `from_docker_image` does the same):
#   docker run --rm -p 8000:8000 sandgym/serve:<hash>
# It serves SANDGYM_ENV (default sandgym/CodeFunction-v0) on 0.0.0.0:8000;
# the other SANDGYM_* variables of sandgym.server.app_from_environment apply.
# Sessions' sandboxes use the `jail` runtime (runtimes/jail/): a uid, a
# chroot and a seccomp filter of their own per sandbox, all within Docker's
# default seccomp profile and capabilities, which is why the server runs as
# the container's root. See docs/serving.md for what that costs.
ARG BASE
FROM ${BASE}
COPY site /opt/sandgym/site
ENV PYTHONPATH=/opt/sandgym/site \
    PYTHONDONTWRITEBYTECODE=1 \
    SANDGYM_ENV=sandgym/CodeFunction-v0 \
    SANDGYM_RUNTIME=jail \
    SANDGYM_HOST=0.0.0.0 \
    SANDGYM_PORT=8000
USER 0:0
WORKDIR /tmp
EXPOSE 8000
# openenv imports its Gradio web UI eagerly; the server never mounts it.
ENTRYPOINT ["python3", "-c", "import sys; sys.modules['gradio'] = None; import sandgym.server; sandgym.server.main()"]
