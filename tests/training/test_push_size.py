"""``python -m training.push_size``: a push's diff text measured in a real git repository, against the size of git's
binary literals computed independently (zlib, then base85 lines of 52 bytes)."""

from __future__ import annotations

import math
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from training.push_size import MIB, change_bytes, commit_bytes, main, pending, uncommitted_bytes

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def literal_bytes(data: bytes) -> int:
    """The text of git's binary literal of ``data``: ``literal N``, then the deflated bytes in lines of at most 52,
    each a length character, base85 (5 characters per 4 bytes) and a newline, then an empty line."""
    packed = zlib.compress(data, 6)
    lines = [packed[i:i + 52] for i in range(0, len(packed), 52)]
    return len(f"literal {len(data)}\n") + sum(2 + 5 * math.ceil(len(line) / 4) for line in lines) + 1


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("a series\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    return root


def random_bytes(rng: np.random.Generator, n: int) -> bytes:
    """Float-like bytes that deflate hardly shrinks, as a pack's tensors."""
    return rng.standard_normal(n // 4).astype(np.float32).tobytes()


def test_a_replaced_binary_file_counts_both_literals(repo):
    rng = np.random.default_rng(0)
    old, new = random_bytes(rng, 200_000), random_bytes(rng, 240_000)
    (repo / "pack.tar").write_bytes(old)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "add")
    added = commit_bytes("HEAD", repo)
    assert literal_bytes(old) < added < literal_bytes(old) * 1.01 + 400  # forward literal, reverse "literal 0"
    (repo / "pack.tar").write_bytes(new)
    replaced = uncommitted_bytes(repo)
    git(repo, "commit", "-q", "-am", "replace")
    both = literal_bytes(old) + literal_bytes(new)
    assert both < commit_bytes("HEAD", repo) == replaced < both * 1.01 + 400
    aside = repo.parent / "aside.tar"
    aside.write_bytes(old)
    assert abs(change_bytes(aside, repo / "pack.tar") - replaced) < 400  # the paths' lengths aside
    assert abs(change_bytes(None, aside) - added) < 400


def test_pending_adds_up_commits_and_what_is_not_committed(repo, capsys):
    rng = np.random.default_rng(1)
    base = git(repo, "rev-parse", "HEAD")
    for n in (100_000, 120_000):
        (repo / "pack.tar").write_bytes(random_bytes(rng, n))
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"pack of {n}")
    (repo / "README").write_text("a series, changed\n")
    (repo / "new.bin").write_bytes(random_bytes(rng, 50_000))
    size = pending(base, repo)
    assert [c.subject for c in size.commits] == ["pack of 100000", "pack of 120000"]
    assert [c.bytes for c in size.commits] == [commit_bytes(c.commit, repo) for c in size.commits]
    assert size.uncommitted > literal_bytes((repo / "new.bin").read_bytes())
    assert size.total == sum(c.bytes for c in size.commits) + size.uncommitted and size.left == 256 * MIB - size.total

    assert main(["--since", base, "--repo", str(repo)]) == 0
    assert "within the limit" in capsys.readouterr().out
    assert main(["--since", base, "--repo", str(repo), "--limit-mib", "0.3"]) == 1
    assert "OVER the limit" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--since", "no-such-rev"], "--since no-such-rev: not a commit of"),
    ([], "the branch has no upstream"),
    (["--since", "HEAD", "--limit-mib", "0"], "--limit-mib must be > 0"),
])
def test_bad_input_exits_2_naming_it(repo, capsys, args, message):
    assert main([*args, "--repo", str(repo)]) == 2
    assert message in capsys.readouterr().err


def test_outside_a_work_tree_exits_2(tmp_path, capsys):
    assert main(["--since", "HEAD", "--repo", str(tmp_path)]) == 2
    assert "not a git repository" in capsys.readouterr().err


def test_a_subfolder_counts_the_whole_work_tree(repo):
    (repo / "sub").mkdir()
    (repo / "top.bin").write_bytes(random_bytes(np.random.default_rng(2), 40_000))
    assert uncommitted_bytes(repo / "sub") == uncommitted_bytes(repo) > literal_bytes((repo / "top.bin").read_bytes())
