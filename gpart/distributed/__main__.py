"""`python -m gpart.distributed ...` (what torchrun launches): the commands of gpart.cli.distributed_commands."""

import sys

from gpart.cli.distributed_commands import main

sys.exit(main())
