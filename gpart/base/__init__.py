"""The base layer: what every other layer may import, importing nothing else of gpart.

- `errors`: the exceptions gpart raises for problems the user can fix, with their exit codes;
- `graph`: the in-memory graph model every reader returns and every partitioner takes;
- `progress`: progress reporting without a UI dependency;
- `version`: the package version written into manifests;
- `spans`: array work split into contiguous spans, one thread each;
- `ids`: the narrowest unsigned dtype for ids below a bound.
"""
