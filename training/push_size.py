"""How much of a push's size limit the commits not yet pushed take, counted as git writes them out.

A host that limits the size of a push's changes adds up the diff text of each commit with its binary files written
out (``git show --binary``). Git writes a changed binary file as two base85 literals, the new content forward and
the old in reverse, each about 1.29 times the file deflated; float tensors hardly deflate. A resume pack of the 0.5B
(:mod:`training.resume_pack`, 35.6 MB) so costs 39 MB where it is added and 78 MB where it replaces the previous one:
a limit of 256 MiB takes three replaced packs and refuses a push of four whole, with everything else in it.

:func:`pending` measures what the commits since ``--since`` (default: the branch's upstream) and the changes not
yet committed (tracked and untracked files) add up to; :func:`change_bytes` what replacing one file by another
costs, which ``python -m training.campaign collect --budget-mib`` uses to keep the packs that fit.

Command line::

    python -m training.push_size [--since REV] [--limit-mib 256] [--json]

Exit status 0 within the limit, 1 over it, 2 on bad input (not a git work tree, an unknown revision).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.cli import UsageError, emit, entry_point, fmt, format_table

__all__ = ["MIB", "DEFAULT_LIMIT_MIB", "CommitSize", "PushSize", "change_bytes", "commit_bytes", "uncommitted_bytes",
           "pending", "main"]

MIB = 1 << 20
DEFAULT_LIMIT_MIB = 256.0
"""The limit on a push's diffs that the series' repository is held to (MiB)."""
_CHUNK = 1 << 20


def _git_output_bytes(args: Sequence[str], repo: str | os.PathLike, *, ok: tuple[int, ...] = (0,)) -> int:
    """The byte count of what ``git ARGS`` prints in ``repo``, read in chunks (a pack's literals are 80 MB)."""
    total = 0
    with tempfile.TemporaryFile() as err, subprocess.Popen(["git", *args], cwd=repo, stdout=subprocess.PIPE,
                                                           stderr=err) as proc:
        while chunk := proc.stdout.read(_CHUNK):
            total += len(chunk)
        if proc.wait() not in ok:
            err.seek(0)
            message = err.read().decode(errors="replace").strip().splitlines()
            raise UsageError(f"git {' '.join(args)} in {repo}: {message[-1] if message else 'failed'}")
    return total


def _git_lines(args: Sequence[str], repo: str | os.PathLike) -> list[str]:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()
        raise UsageError(f"git {' '.join(args)} in {repo}: {message[-1] if message else 'failed'}")
    return done.stdout.splitlines()


def change_bytes(old: str | os.PathLike | None, new: str | os.PathLike | None) -> int:
    """The diff text that replacing file ``old`` by ``new`` adds to a commit (``None``: the file is added, or
    removed), as ``git diff --binary`` writes it; the paths' lengths aside, what ``git show --binary`` counts for
    that change."""
    if old is None and new is None:
        raise ValueError("change_bytes: name at least one file")
    sides = [os.devnull if p is None else str(Path(p).resolve()) for p in (old, new)]
    return _git_output_bytes(["diff", "--no-index", "--binary", *sides], Path.cwd(), ok=(0, 1))


def commit_bytes(rev: str, repo: str | os.PathLike = ".") -> int:
    """The diff text of one commit with binary files written out, against its first parent (the root commit: against
    nothing)."""
    return _git_output_bytes(["show", "--binary", "--format=", "--diff-merges=first-parent", rev], repo)


def _top(folder: str | os.PathLike) -> Path:
    """The top folder of the work tree that holds ``folder`` (:class:`UsageError` outside one)."""
    return Path(_git_lines(["rev-parse", "--show-toplevel"], folder)[0])


def uncommitted_bytes(repo: str | os.PathLike = ".") -> int:
    """The diff text of what is not committed yet in the work tree that holds ``repo``: tracked files changed
    against ``HEAD`` (staged or not) and untracked files that ``.gitignore`` does not ignore, each as an added
    file."""
    repo = _top(repo)
    total = _git_output_bytes(["diff", "--binary", "HEAD"], repo)
    for name in _git_lines(["ls-files", "--others", "--exclude-standard"], repo):
        total += change_bytes(None, repo / name)
    return total


@dataclass(frozen=True)
class CommitSize:
    """One commit's share: its abbreviated hash, subject and diff bytes."""
    commit: str
    subject: str
    bytes: int


@dataclass(frozen=True)
class PushSize:
    """What a push of the commits since ``since`` (and of the changes not committed yet) adds up to.

    Attributes
    ----------
    since : str
        The revision the commits are counted from (not included).
    commits : list of CommitSize
        Oldest first.
    uncommitted : int
        Bytes of the changes not committed yet.
    limit : int
        The limit in bytes.
    """
    since: str
    commits: list[CommitSize] = field(default_factory=list)
    uncommitted: int = 0
    limit: int = int(DEFAULT_LIMIT_MIB * MIB)

    @property
    def total(self) -> int:
        return sum(c.bytes for c in self.commits) + self.uncommitted

    @property
    def left(self) -> int:
        """Bytes still free under the limit (negative: over it)."""
        return self.limit - self.total


def _upstream(repo: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}"], cwd=repo,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError("--since: the branch has no upstream; name the last pushed commit (--since REV)")
    return done.stdout.strip()


def pending(since: str | None = None, repo: str | os.PathLike = ".", *,
            limit_mib: float = DEFAULT_LIMIT_MIB) -> PushSize:
    """Measure the commits ``since..HEAD`` (default: the upstream's) and the changes not yet committed.

    Raises
    ------
    UsageError
        ``repo`` is not a git work tree, or ``since`` is not a revision of it.
    """
    repo = _top(repo)
    since = since or _upstream(repo)
    if subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{since}^{{commit}}"], cwd=repo,
                      capture_output=True).returncode != 0:
        raise UsageError(f"--since {since}: not a commit of {repo}")
    commits = []
    for line in _git_lines(["log", "--reverse", "--format=%h%x00%s", f"{since}..HEAD"], repo):
        sha, subject = line.split("\0", 1)
        commits.append(CommitSize(sha, subject, commit_bytes(sha, repo)))
    return PushSize(since, commits, uncommitted_bytes(repo), int(limit_mib * MIB))


def _table(size: PushSize) -> str:
    rows = [[c.commit, fmt(c.bytes / 1e6, 1), c.subject[:70]] for c in size.commits]
    if size.uncommitted:
        rows.append(["(not committed)", fmt(size.uncommitted / 1e6, 1), "tracked changes and untracked files"])
    head = format_table(["commit", "MB", "subject"], rows, title=f"{len(size.commits)} commits since {size.since}")
    verdict = "within the limit" if size.left >= 0 else "OVER the limit: the push is refused whole"
    return (f"{head}\ntotal {fmt(size.total / 1e6, 1)} MB of {fmt(size.limit / 1e6, 1)} MB ({size.limit / MIB:g} "
            f"MiB): {verdict}; {fmt(size.left / 1e6, 1)} MB left")


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.push_size", description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", metavar="REV", help="the last pushed commit (default: the branch's upstream)")
    parser.add_argument("--limit-mib", type=float, default=DEFAULT_LIMIT_MIB,
                        help=f"the limit on a push's diffs in MiB (default {DEFAULT_LIMIT_MIB:g})")
    parser.add_argument("--repo", default=".", help="the work tree (default: the current folder)")
    parser.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    args = parser.parse_args(argv)
    if args.limit_mib <= 0:
        raise UsageError(f"--limit-mib must be > 0, got {args.limit_mib}")
    size = pending(args.since, args.repo, limit_mib=args.limit_mib)
    result = {"since": size.since, "commits": [vars(c) for c in size.commits], "uncommitted": size.uncommitted,
              "total": size.total, "limit": size.limit, "left": size.left}
    emit(args.json, result, _table(size))
    return 0 if size.left >= 0 else 1


main = entry_point(_main, "training.push_size")

if __name__ == "__main__":
    sys.exit(main())
