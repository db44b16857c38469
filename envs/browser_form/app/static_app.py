"""A static-file app (the MiniWoB++ pages), served inside the browser sandbox like the form app."""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

app = Starlette(routes=[Mount("/", StaticFiles(directory=os.environ["SANDGYM_STATIC_ROOT"], html=True))])
