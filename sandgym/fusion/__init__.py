"""SandboxFusion-compatible code execution: `POST /run_code` in many
languages, each program compiled and run in one sandbox of the `polyglot`
image on any runtime. languages.py (the language table), run_code.py (one
request: models and the run), api.py (the FastAPI routes)."""
