"""Command-line values shared by several commands: parsers and the `--method` option."""
