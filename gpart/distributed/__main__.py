"""`python -m gpart.distributed ...` (what torchrun launches): the commands of gpart.cli.distributed."""

import sys

from gpart.cli.distributed import main

sys.exit(main())
