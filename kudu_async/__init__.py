"""kudu_async: Apache Kudu re-built in Python on asyncio.

The kudu-python-compatible client surface (``kudu_async.connect``, type constants, FLUSH_* ...) is added
here by the client package.
"""

from kudu_async.version import __version__

__all__ = ["__version__"]
