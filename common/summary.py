"""`python -m common.summary`: the entry point of common.analysis.summary (kept short to type)."""

from common.analysis.summary import main

if __name__ == "__main__":
    raise SystemExit(main())
