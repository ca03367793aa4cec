"""``python -m gradflow``: the ``gradflow`` command line."""

from ._cli import main

raise SystemExit(main())
