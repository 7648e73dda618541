"""`python -m forged` runs the command line."""

from forged.cli.commands import main

raise SystemExit(main())
