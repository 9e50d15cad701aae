"""`python -m transformer_mt` runs the command-line interface."""

from transformer_mt.cli import main

raise SystemExit(main())
