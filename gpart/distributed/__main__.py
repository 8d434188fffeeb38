"""`python -m gpart.distributed ...` (what torchrun launches): the commands of gpart.cli.commands.distributed."""

import sys

from gpart.cli.commands.distributed import main

sys.exit(main())
