"""What the commands print: rich tables and progress, JSON, and the exit code of a failure."""
