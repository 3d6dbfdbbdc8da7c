"""``python -m rooftune.cli``: the command line, as the ``rooftune`` script runs it."""

from rooftune.cli.main import main

raise SystemExit(main())
