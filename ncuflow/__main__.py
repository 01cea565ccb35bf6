import sys

from ncuflow.cli import main

# click's non-standalone mode returns the exit status of `raise Exit(n)` instead of
# exiting; pass it on, or `python -m ncuflow doctor --strict` would always exit 0.
sys.exit(main())
