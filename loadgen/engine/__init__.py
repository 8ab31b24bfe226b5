"""The Locust/gevent child: everything that runs inside a load, calibration or doctor process.

Nothing outside this package imports it (importing locust or gevent patches a whole process);
the parent (``loadgen.runner`` and the CLI) starts it by path or ``python -m`` and reads its files.
"""

from rushhour.loadgen.compiled import install_wire

# Before any module of this package loads: the wire client's compiled build when it matches the sources
# (RUSHHOUR_COMPILED=0: never), so `rushhour run`'s Locust processes, workers and a user's `locust -f` all run it.
install_wire()
