"""`python -m preflight.cli`: the same entry as the console script."""
from . import entry

entry()
