"""The `jail` backend: a uid, a chroot and a seccomp filter per sandbox,
for the OpenEnv server image under Docker's default profile (runtime.py)."""
