"""The package version, in its own module so that modules inside the package can name it
without importing the package's public face."""

__version__ = "0.1.0"
