"""The bundled form app (runs inside the browser sandbox) and its database schema."""
