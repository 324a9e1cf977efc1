"""A script for tests/test_zygote.py: it reports how it was started, so that a forked start of a test
script can be compared with an exec'd one. `python zygote_probe.py CODE`: echoes stdin upper-cased,
then exits with CODE; `raise` instead of a code ends by an uncaught exception."""

import os
import sys

here = os.path.dirname(os.path.realpath(__file__))
print(__name__, __file__, sys.argv, sys.path[0] == here, here not in sys.path[1:], sorted(os.listdir("/proc/self/fd")))
print(sys.stdin.read().upper(), end="", flush=True)
sys.stderr.write("on stderr\n")
if sys.argv[1] == "raise":
    raise RuntimeError("raised by the probe")
sys.exit(int(sys.argv[1]))
