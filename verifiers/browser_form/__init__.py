"""Verifier of the browser-form family: the web app's server-side state against hidden checks (`host.py`)."""
