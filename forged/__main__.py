"""`python -m forged` runs the command line."""

from forged.cli import main

raise SystemExit(main())
