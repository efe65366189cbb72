"""The pictures of the diagnostics' and re-scoring commands' JSON, drawn beside it.

Statistics commands write data (``diagnostics`` never draws); this command draws what they wrote, into the
JSON's own folder unless ``--out`` says otherwise, under the names their Markdown reports link to:

============================================  ==================================================================
JSON (written by)                             pictures
============================================  ==================================================================
``report.json`` (``diagnostics.report``)      ``auroc.png``, ``delta_auroc.png``, ``dratio.png``, one
                                              ``cloud_<tail>.png`` per tail (:func:`diagnostics.tails.cloud_file`)
                                              and ``credit.png`` (:func:`figures.credit.save`) where the report
                                              has the credit
``tails.json`` (``diagnostics.tails``)        ``cloud_<tail>.png`` per tail
``strata_<by>.json`` (``diagnostics.strata``) ``strata_<by>.png`` (:func:`figures.strata_panels.draw_strata`)
``audit.json`` (``rescoring.audit``)          ``audit.png`` (:func:`figures.audit_panels.draw_audit`) and the
                                              design's word clouds
============================================  ==================================================================

The kind of a file is read from its keys, not its name.

Command::

    python -m figures.panels JSON [JSON ...] [--out DIR] [--dpi 120] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from figures import credit as credit_figure
from figures._common import FigureError, read_json_file
from figures.audit_panels import draw_audit
from figures.fig2_diagnosis import write_clouds, write_panels
from figures.strata_panels import draw_strata
from ocsd.cli import entry_point, non_negative_int, output_folder, positive_int

__all__ = ["KINDS", "kind_of", "draw_file", "main"]

KINDS: dict[str, tuple[str, ...]] = {
    "report": ("auroc", "robustness", "dratio", "tails"),
    "audit": ("points", "baseline", "design"),
    "strata": ("by", "strata", "within", "pooled"),
    "tails": ("top", "overlap", "clouds"),
}
"""Kind of a diagnostics JSON -> the keys that identify it (checked in this order)."""


def kind_of(result: Mapping) -> str:
    """The kind of a diagnostics JSON (:data:`KINDS`); :class:`FigureError` if it is none of them."""
    for kind, keys in KINDS.items():
        if isinstance(result, Mapping) and all(k in result for k in keys):
            return kind
    raise FigureError("not the JSON of diagnostics.report, diagnostics.tails, diagnostics.strata or rescoring.audit "
                      f"(expected the keys of one of: {', '.join(f'{k} {list(v)}' for k, v in KINDS.items())})")


def _clouds(tails: Mapping, out: Path, seed: int) -> list[str]:
    """The word clouds of a tails result; none when the JSON predates the ``clouds`` key."""
    return list(write_clouds(tails.get("clouds") or {}, out, seed=seed).values())


def _credit(report: Mapping, out: Path, dpi: int) -> list[str]:
    """The report's ``credit.png``; none when the report has no credit (written before it, or without labels)."""
    if not report.get("credit"):
        return []
    written = credit_figure.save([("the report's steps", report["credit"])], out, dpi=dpi)
    return [str(p) for p in written if Path(p).suffix == ".png"]


def draw_file(path, out: Path | None = None, *, dpi: int = 120, seed: int = 0) -> list[str]:
    """Draw the pictures of one diagnostics JSON (:data:`KINDS`) into ``out`` (default: the JSON's folder).

    Returns
    -------
    list of str
        The PNG files written.
    """
    path, result = read_json_file(path, "report.json", "diagnostics JSON")
    out = Path(out) if out is not None else path.parent
    try:
        kind = kind_of(result)
    except FigureError as exc:
        raise FigureError(f"{path}: {exc}") from None
    draw: dict[str, Callable[[], list[str]]] = {
        "report": lambda: [*write_panels(result, out, dpi=dpi).values(), *_clouds(result["tails"], out, seed),
                           *_credit(result, out, dpi)],
        "tails": lambda: _clouds(result, out, seed),
        "strata": lambda: [str(draw_strata(result, out, source=result.get("source", ""), dpi=dpi))],
        "audit": lambda: [str(draw_audit(result, out, dpi=dpi)), *_clouds(result["design"]["tails"], out, seed)],
    }
    return draw[kind]()


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m figures.panels", description=__doc__.split("\n")[0])
    parser.add_argument("json", nargs="+", metavar="JSON", help="a JSON written by diagnostics.report, "
                        "diagnostics.tails, diagnostics.strata or rescoring.audit (or the folder of a report.json)")
    parser.add_argument("--out", type=output_folder, default=None, metavar="DIR",
                        help="output folder (default: each JSON's own folder)")
    parser.add_argument("--dpi", type=positive_int("--dpi"), default=120, help="PNG resolution (default 120)")
    parser.add_argument("--seed", type=non_negative_int("--seed"), default=0, help="word-cloud layout seed (0)")
    args = parser.parse_args(argv)
    for file in args.json:
        written = draw_file(file, args.out, dpi=args.dpi, seed=args.seed)
        print(f"{file}: wrote {', '.join(written) if written else 'nothing (no picture in this JSON)'}")
    return 0


main = entry_point(_main, "figures.panels")


if __name__ == "__main__":
    sys.exit(main())
