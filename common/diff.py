"""`python -m common.diff`: the entry point of common.analysis.diff (kept short to type)."""

from common.analysis.diff import main

if __name__ == "__main__":
    raise SystemExit(main())
