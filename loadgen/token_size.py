"""How many bytes a token is taken to be when no tokenizer counts them: one convention, below prompts and templates.

The testbed counts a prompt's tokens as ceil(bytes / 4) (``testbed/tokens.py``); prompt text is sized by the same
rule without a scenario tokenizer (``prompts``), and the caps on a rendered chat template and a dataset row's text
are stated in it (``chat_template``, ``datasets``). Standard library only, imports nothing.
"""

from __future__ import annotations

BYTES_PER_TOKEN = 4  # same convention as the testbed's token counter (ceil(bytes / 4))
