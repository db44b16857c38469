"""The `local` backend: bubblewrap namespace sandboxes forked from a zygote
(runtime.py), the bubblewrap arguments (bwrap.py), the browser sandbox in a
bubblewrap sandbox and a cgroup (browser.py)."""
