"""See the module docstrings inside this package."""
