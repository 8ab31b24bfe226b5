"""`python -m testbed`."""

import sys

from testbed.cli import main

sys.exit(main())
