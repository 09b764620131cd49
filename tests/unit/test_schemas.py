import json
from pathlib import Path

from gradebox.cli.schemas import schema_documents

COMMITTED = Path(__file__).resolve().parents[2] / "schemas"


def test_committed_schemas_are_fresh():
    docs = schema_documents()
    stale = [
        name
        for name, doc in docs.items()
        if not (COMMITTED / name).is_file()
        or json.loads((COMMITTED / name).read_text()) != json.loads(json.dumps(doc))
    ]
    assert not stale, f"run `make schemas` and commit: {stale}"


def test_schemas_cover_the_contract():
    docs = schema_documents()
    assert {
        "payload.schema.json",
        "grader.schema.json",
        "result.schema.json",
        "inline-grader-input.schema.json",
        "inline-grader-result.schema.json",
        "suite.schema.json",
    } <= set(docs)
    assert "pass" in docs["inline-grader-result.schema.json"]["properties"]
    assert "file_changes" in docs["payload.schema.json"]["properties"]
    assert "status" in docs["result.schema.json"]["properties"]
