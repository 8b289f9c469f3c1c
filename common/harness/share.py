"""Sharing a run's traces: the Hub login a reader needs, found offline, and the trace-util command to print."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from common.cli import WIDTH, fit_command
from common.files import shown_path

LOGIN_COMMAND = "uvx --from huggingface_hub hf auth login"


def hub_token_path() -> Path:
    """Where huggingface_hub keeps the login token: $HF_TOKEN_PATH, else $HF_HOME/token, else
    ~/.cache/huggingface/token (under $XDG_CACHE_HOME when set), as `huggingface_hub.constants` reads it."""
    if os.environ.get("HF_TOKEN_PATH"):
        return Path(os.path.expanduser(os.environ["HF_TOKEN_PATH"]))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    return Path(os.path.expanduser(home)) / "token"


def hub_token_found() -> bool:
    """Whether trace-util will find a Hub token, looked up as huggingface_hub does but offline and without
    importing it: a CI token exchange (HF_OIDC_RESOURCE), HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN),
    then the token file that `hf auth login` writes."""
    if any(os.environ.get(name, "").strip() for name in ("HF_OIDC_RESOURCE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")):
        return True
    try:
        return bool(hub_token_path().read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False


SHARE_TOOL = "trace-util==0.1.0"  # 0.2.0 needs Python 3.12+ and another command line; 0.1.0 runs on 3.9 to 3.13


def share_command(traces_root: Path) -> str:
    """The trace-util command that uploads `traces_root` to a Hub bucket and prints Perfetto links.

    Pinned to 0.1.0: a bare `uvx trace-util` resolves 0.2.0 on Python 3.12+, which rejects this form. The folder
    is quoted for the shell where it needs to be (a space in its name)."""
    return f"uvx --from {SHARE_TOOL} trace-util {shlex.quote(str(shown_path(traces_root)))} -b traces"


def share_lines(traces_root: Path) -> list[str]:
    """How to open or share the traces: Perfetto, then trace-util, after the login where there is no token."""
    lines = ["open the trace at https://ui.perfetto.dev (drag the .json in)"]
    if not hub_token_found():
        lines.append(f"to share, log in to the Hub once: {LOGIN_COMMAND}")
    line = f"share {shown_path(traces_root)}/ as Perfetto links: {share_command(traces_root)}"
    if len(line) > WIDTH:  # a long traces folder: the command on lines of its own, whole, as a shell joins them
        head = f"share {shown_path(traces_root)}/ as Perfetto links:"
        head = head if len(head) <= WIDTH else "share the traces as Perfetto links:"
        line = f"{head}\n{fit_command(share_command(traces_root))}"
    lines.append(line)
    return lines
