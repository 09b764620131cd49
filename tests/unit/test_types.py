import pytest
from pydantic import BaseModel

from gradebox.core.types import Bytes, Duration, format_bytes, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("60s", 60), ("2m", 120), ("1h", 3600), ("1.5s", 1.5), (" 10s ", 10)],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [60, "60", "10 minutes", "-1s", "0s", None, True])
def test_durations_need_a_unit(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_bare_number_message_suggests_the_fix():
    with pytest.raises(ValueError, match="write 60s"):
        parse_duration(60)


def test_format_roundtrip():
    assert format_duration(2.0) == "2s"
    assert format_duration(0.5) == "500ms"
    assert format_duration(120) == "2m"
    assert format_bytes(1 << 30) == "1 GiB"
    assert format_bytes(1536) == "1.5 KiB"


def test_bytes_and_duration_in_models():
    class M(BaseModel):
        size: Bytes
        timeout: Duration

    m = M(size="512MiB", timeout="2s")
    assert int(m.size) == 512 << 20 and m.timeout == 2.0
    assert m.model_dump(mode="json") == {"size": "512 MiB", "timeout": "2s"}
