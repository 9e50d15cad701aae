"""`python -m transformer_mt` runs the command-line interface."""

from transformer_mt.cli import main

if __name__ == "__main__":  # not when a worker process started with "spawn" imports this module
    raise SystemExit(main())
