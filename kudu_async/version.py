"""The one place the version string lives."""

__version__ = "0.1.0"
