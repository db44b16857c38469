"""Entry point of the verifier's runner; the logic lives in judge.py.

Kept tiny: a script is compiled on every run, an imported module's
bytecode is cached when the boundary folder is staged.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out

import judge

judge.main()
