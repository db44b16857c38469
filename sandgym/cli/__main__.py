"""`python -m sandgym.cli ...`: the command line."""

from . import app

app()
