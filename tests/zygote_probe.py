"""A script for tests/test_zygote.py: it reports how it was started, so that a forked start of a test
script can be compared with an exec'd one. `python zygote_probe.py CODE`: echoes stdin upper-cased,
then exits with CODE; `raise` instead of a code ends by an uncaught exception, `end` by the end of
the script."""

import atexit
import os
import sys
from typing import Any

here = os.path.dirname(os.path.realpath(__file__))
print(__name__, __file__, sys.argv, sys.path[0] == here, here not in sys.path[1:], sorted(os.listdir("/proc/self/fd")))
print(__package__, __spec__, type(__builtins__).__name__, type(__loader__).__name__, __cached__, __doc__ is not None)
annotated: Any = None
print(__annotations__)  # evaluated, as without `from __future__ import annotations`
atexit.register(lambda: print("at exit, __main__ is", getattr(sys.modules["__main__"], "__file__", "done")))
print(sys.stdin.read().upper(), end="", flush=True)
sys.stderr.write("on stderr\n")
if sys.argv[1] == "raise":
    raise RuntimeError("raised by the probe")
if sys.argv[1] != "end":
    sys.exit(int(sys.argv[1]))
