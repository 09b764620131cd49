"""AgentV's own examples/ (111 eval files, by its discovery rule), swept as a user would load
them: the regression guard of the reader. Needs shared/corpus (see ``shared_corpus``)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from agentv_sweep import eval_files, sweep  # noqa: E402

# What stays refused, each for a reason the README's AgentV table gives.
REFUSED = {
    "a lifecycle extension": 5,  # JavaScript modules run in AgentV's own process
    "a privilege not allowed (--allow)": 1,  # docker-workspace asks for 2 GiB: --allow limits
}


def test_agentv_examples_load_as_written(agentv_checkout):
    examples = agentv_checkout / "examples"
    assert len(eval_files(examples)) == 111  # AgentV's discovery rule over its examples
    outcomes = sweep(agentv_checkout)
    kinds = Counter(o.kind for o in outcomes)
    broken = [f"{o.file}: {o.why}" for o in outcomes if o.kind == "BROKEN"]
    assert broken == []
    assert kinds["LOADS"] >= 105 and kinds["LOADS"] + kinds["REFUSED"] == 111  # issue 41's goal
    refused = Counter(o.feature for o in outcomes if o.kind == "REFUSED")
    assert refused == REFUSED
    for o in outcomes:
        if o.kind == "REFUSED":  # one line, naming the feature and what to do instead
            assert "\n" not in o.why and len(o.why) > 60, o.why


def test_agentv_own_evals_find_files_named_from_the_repository(agentv_checkout):
    # AgentV's evals/ name inputs from the repository's top (``/plugins/.../SKILL.md``).
    outcomes = sweep(agentv_checkout / "evals")
    assert len(outcomes) == 8
    broken = {o.file: o.why for o in outcomes if o.kind == "BROKEN"}
    # Only the two naming docs/getting-started/installation.mdx, gone at this commit (moved
    # to docs/next/ and docs/v4.42.4/): AgentV warns and drops the part, we refuse the file.
    assert sorted(broken) == [
        "agentv-dev/skills/output-correctness.eval.yaml",
        "agentv-dev/skills/skill-invocation.eval.yaml",
    ]
    assert all("getting-started/installation.mdx' not found" in w for w in broken.values())
