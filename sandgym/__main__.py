"""`python -m sandgym ...`: the command line (where no console script is installed)."""

from .cli import app

app()
