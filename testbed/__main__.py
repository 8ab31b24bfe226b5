"""`python -m rushhour.testbed`."""

import sys

from rushhour.testbed.cli import main

sys.exit(main())
