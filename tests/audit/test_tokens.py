"""Token fidelity per tier: server-reported prompt counts against the intended ones, output against asked."""

from __future__ import annotations

import pandas as pd
import pytest

from rushhour.audit.tokens import token_fidelity


def test_token_fidelity_per_tier() -> None:
    frame = pd.DataFrame({
        "cls": ["served", "served", "served", "queue_full"],
        "prompt_tokens": [100, 103, 90, None],
        "prompt_tokens_intended": [100, 100, 100, 100],
        "prompt_tokens_exact": [False, False, False, False],
        "output_tokens": [64, 32, 64, None],
        "max_tokens": [64, 64, 64, 64],
        "output_pinned": [True, True, True, True],
    })
    fit = token_fidelity(frame)
    assert fit is not None
    assert (fit.prompt_n, fit.prompt_diff_median, fit.prompt_exact_basis) == (3, 0.0, False)
    assert fit.prompt_share_exact == pytest.approx(1 / 3)
    assert fit.output_share_equal == pytest.approx(2 / 3) and fit.output_ratio_median == 1.0
    assert token_fidelity(frame[frame["cls"] == "queue_full"]) is None
