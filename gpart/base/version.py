"""The package version, written into every manifest (SPEC.md, "Manifests")."""

__version__ = "0.1.0"
