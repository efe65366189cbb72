"""Word occurrences of loaded replay data, with their signals, roles and clusters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnostics.load import DiagData
from diagnostics.roles import ROLES, assign_roles, get_lexicon
from ocsd.environments.lexicon import Lexicon
from diagnostics.words import segment_words, word_means, word_type

__all__ = ["word_table"]


def word_table(data: DiagData, *, lexicon: Lexicon | None = None, centre: bool = False) -> pd.DataFrame:
    """One row per word occurrence of the loaded steps.

    Parameters
    ----------
    data : DiagData
    lexicon : Lexicon, optional
        Role lexicon (default: the one registered for ``data.env``).
    centre : bool, default False
        Subtract each checkpoint's token mean from every token signal before merging (the tail
        analysis' checkpoint centring). ``m_R``/``m_A`` always use the raw signals.

    Returns
    -------
    pandas.DataFrame
        Columns ``step, ckpt, cluster, text, type, role, n_tokens, full, ablated, residual,
        m_R, m_A``: word means of delta_F, delta_A and e (centred if asked) and the mean absolute
        residual and ablated support over the word's tokens.
    """
    lexicon = lexicon if lexicon is not None else get_lexicon(data.env)
    tok = data.tokens
    step = tok["step"].to_numpy()
    spans = segment_words(tok["token"].tolist(), step)
    steps = data.steps
    tok_ckpt = steps["ckpt"].to_numpy()[step]
    signals = np.column_stack([tok["d_full"].to_numpy(), tok["d_ablated"].to_numpy(), tok["residual"].to_numpy()])
    if centre and len(signals):
        sums = np.stack([np.bincount(tok_ckpt, weights=signals[:, j], minlength=data.n_checkpoints)
                         for j in range(3)], axis=1)
        n = np.bincount(tok_ckpt, minlength=data.n_checkpoints)[:, None]
        signals = signals - (sums / np.maximum(n, 1))[tok_ckpt]
    means = word_means(signals, spans) if len(spans) else np.zeros((0, 3))
    abs_means = word_means(np.abs(np.column_stack([tok["residual"].to_numpy(), tok["d_ablated"].to_numpy()])),
                           spans) if len(spans) else np.zeros((0, 2))
    codes, uniques = pd.factorize(pd.Series(spans.text, dtype=object))
    types = np.asarray([word_type(u) for u in uniques], dtype=object)[codes] if len(spans) else np.zeros(0, object)
    roles = assign_roles(spans.text, spans.step, lexicon=lexicon)
    return pd.DataFrame({
        "step": spans.step,
        "ckpt": steps["ckpt"].to_numpy()[spans.step],
        "cluster": steps["cluster"].to_numpy()[spans.step],
        "text": spans.text,
        "type": types,
        "role": pd.Categorical.from_codes(roles, categories=list(ROLES)) if len(spans) else
        pd.Categorical([], categories=list(ROLES)),
        "n_tokens": spans.n_tokens,
        "full": means[:, 0], "ablated": means[:, 1], "residual": means[:, 2],
        "m_R": abs_means[:, 0], "m_A": abs_means[:, 1],
    })
