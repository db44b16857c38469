"""The `k8s` backend: pods under runc, gVisor or Kata RuntimeClasses
(runtime.py), what they are made of (pods.py), the API calls (api.py), the
browser sandbox as a pod (browser.py) and the host-side relay of its
browser's pipes (exec_relay.py)."""
