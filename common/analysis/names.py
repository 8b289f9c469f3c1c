"""Trace names made to fit the summary's table: the words every name shares dropped, then the middle cut."""

from __future__ import annotations

from collections import Counter


def short_trace_names(names: list[str]) -> dict[str, str]:
    """`script/tag` -> the same with the script cut to the fewest leading words that still tell the scripts
    apart (`04_c_sdpa_attention/...` -> `04_c/...`, `03_kernels_mlp/...` -> `03_kernels/...`)."""
    scripts = sorted({n.split("/")[0] for n in names if "/" in n})
    short = {}
    for script in scripts:
        words = script.split("_")
        for k in range(1, len(words) + 1):
            prefix = "_".join(words[:k])
            if sum(other == prefix or other.startswith(prefix + "_") for other in scripts) == 1:
                short[script] = prefix
                break
    return {
        n: short.get(n.split("/")[0], n.split("/")[0]) + n[len(n.split("/")[0]) :] if "/" in n else n for n in names
    }


def without_shared_words(tags: list[str], room: int) -> list[str]:
    """The tags with words (between `_`) that every one of them has left out, each run of them one `…`, the last
    such word first, as few as make every tag fit `room`: what is left tells the tags apart
    (`1_128_768_12_3072_cudagraphs_amp_bf16_cold_compiled` among the H200's 05 tags ->
    `1_128_768_12_…_cudagraphs_…_compiled`)."""
    words = [tag.split("_") for tag in tags]
    shared = set.intersection(*map(set, words)) if len(tags) > 1 else set()
    order = [w for w in reversed(dict.fromkeys(words[0])) if w in shared]  # the last shared word goes first
    out = tags
    for k in range(1, len(order) + 1):
        gone = set(order[:k])
        out = []
        for tag_words in words:
            kept: list[str] = []
            for word in tag_words:
                if word not in gone:
                    kept.append(word)
                elif not kept or kept[-1] != "…":
                    kept.append("…")
            out.append("_".join(kept))
        if all(len(tag) <= room for tag in out):
            break
    return out


def _cut_middle(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    keep = room - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


def fitted_names(names: list[str], room: int) -> dict[str, str]:
    """Each of `names` (distinct) made to fit `room` characters, keeping what tells it from the others: the script
    cut to its fewest telling words; where a script's names are still too long, the tag words all of them share
    left out (`…`); only then a cut in the middle. No two come out alike (a clash is numbered)."""
    if all(len(name) <= room for name in names):
        return {name: name for name in names}
    short = short_trace_names(names)
    scripts: dict[str, list[str]] = {}
    for name in names:
        scripts.setdefault(name.split("/")[0] if "/" in name else "", []).append(name)
    fitted = {}
    for script, members in scripts.items():
        if not script or all(len(short[n]) <= room for n in members):
            fitted.update({n: short[n] for n in members})
            continue
        head = short[members[0]].split("/")[0]
        tags = without_shared_words([n.split("/", 1)[1] for n in members], room - len(head) - 1)
        fitted.update({n: f"{head}/{tag}" for n, tag in zip(members, tags, strict=True)})
    fitted = {n: _cut_middle(text, room) for n, text in fitted.items()}
    clashes = Counter(fitted.values())
    numbered: Counter = Counter()
    for name in names:
        if clashes[fitted[name]] > 1:
            numbered[fitted[name]] += 1
            mark = f" #{numbered[fitted[name]]}"
            fitted[name] = _cut_middle(fitted[name], room - len(mark)) + mark
    return fitted
