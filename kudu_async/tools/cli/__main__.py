"""``python -m kudu_async.tools.cli``: the ``kudu`` tool without its console script."""

import sys

from kudu_async.tools.cli import main

sys.exit(main())
