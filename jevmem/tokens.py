"""Context tokens of retrieved evidence, counted with a real LLM tokenizer: o200k_base (the
GPT-4o family's encoding) from the npm package ``gpt-tokenizer`` (pinned in
``scripts/tokens/package.json``; ``scripts/setup`` installs it), run once per benchmark with
every text at once. Needs a source checkout and Node.js; without them, :func:`count` says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

TOKENIZER = "o200k_base (gpt-tokenizer 4.0.0)"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tokens" / "count.mjs"


class TokenizerUnavailable(RuntimeError):
    """Node.js or the counting script's package is not installed here."""


def count(texts: Sequence[str], timeout_s: float = 300.0) -> list[int]:
    """The token count of each text, in order."""
    if not texts:
        return []
    node = shutil.which("node")
    if node is None or not (SCRIPT.parent / "node_modules" / "gpt-tokenizer").is_dir():
        raise TokenizerUnavailable("token counts need Node.js and `npm ci` in scripts/tokens (scripts/setup does it)")
    out = subprocess.run([node, str(SCRIPT)], input=json.dumps(list(texts)), capture_output=True, text=True,
                         timeout=timeout_s, check=False)
    if out.returncode != 0:
        raise TokenizerUnavailable(f"the token counter failed: {out.stderr.strip()[:300]}")
    counts: list[int] = json.loads(out.stdout)
    if len(counts) != len(texts):
        raise TokenizerUnavailable(f"the token counter answered {len(counts)} counts for {len(texts)} texts")
    return counts
