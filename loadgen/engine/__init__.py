"""The Locust/gevent child: everything that runs inside a load, calibration or doctor process.

Nothing outside this package imports it (importing locust or gevent patches a whole process);
the parent (``loadgen.runner`` and the CLI) starts it by path or ``python -m`` and reads its files.
"""
