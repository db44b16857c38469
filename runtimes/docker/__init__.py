"""The `docker` backend: containers of the Docker Engine under runc, gVisor
or Kata (runtime.py), and the browser sandbox as a container (browser.py)."""
