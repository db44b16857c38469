"""The browser-form family (sandgym/BrowserForm-v0) and the MiniWoB++ envs (sandgym/MiniWoB-<task>-v0)."""
