"""In-sandbox code of the browser sandbox (the launcher), mounted read-only."""
