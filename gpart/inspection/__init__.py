"""`gpart info` and `gpart verify`: what a result holds, and proof that it is intact."""
