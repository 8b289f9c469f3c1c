"""What a run prints after profiling: the table, the files written, how to share them."""

from __future__ import annotations

from common.export import key_averages_table, share_command
from common.profiling import Profiled
from common.setup import Run

TABLE_ROWS = 15


def report(result: Profiled, run: Run) -> None:
    """Print the top of the key_averages table, the two paths, and the trace-util command."""
    print()
    print(key_averages_table(result.prof, run.on_gpu, row_limit=TABLE_ROWS))
    print(f"trace: {result.trace_path}")
    print(f"table: {result.table_path}")
    print(f"open the trace at https://ui.perfetto.dev, or share traces/ with: "
          f"{share_command(run.traces_dir.parent)}")
