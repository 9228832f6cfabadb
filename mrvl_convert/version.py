"""The library's version, in one place (the package, the manifest and the CLI read it)."""
__version__ = "0.1.0"
