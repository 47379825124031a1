from ._signals import pause_point
from .cli import main

status = main(process=True)
pause_point("exit")  # tests only: Ctrl-C while Python exits (CONTRIBUTING.md, "Testing Ctrl-C")
raise SystemExit(status)
