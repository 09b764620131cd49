from fractions import Fraction as F

import pytest

from gradebox.drivers.batch import GradedRecord, Record, graded, read_records
from gradebox.drivers.calibrate import ReviewItem, review_sheet, sample
from gradebox.drivers.trials import pass_at_k, pass_hat_k, summarise_trials
from gradebox.errors import ConfigError
from gradebox.protocol.models import GraderResult, Status
from tests.conftest import write

# n = 5 trials; rows c = 0..5, columns k = 1..5, worked out by hand from C(5, k) = 5, 10, 10, 5, 1.
PASS_AT = {
    0: [0, 0, 0, 0, 0],
    1: [F(1, 5), F(2, 5), F(3, 5), F(4, 5), 1],
    2: [F(2, 5), F(7, 10), F(9, 10), 1, 1],
    3: [F(3, 5), F(9, 10), 1, 1, 1],
    4: [F(4, 5), 1, 1, 1, 1],
    5: [1, 1, 1, 1, 1],
}
PASS_HAT = {
    0: [0, 0, 0, 0, 0],
    1: [F(1, 5), 0, 0, 0, 0],
    2: [F(2, 5), F(1, 10), 0, 0, 0],
    3: [F(3, 5), F(3, 10), F(1, 10), 0, 0],
    4: [F(4, 5), F(3, 5), F(2, 5), F(1, 5), 0],
    5: [1, 1, 1, 1, 1],
}


@pytest.mark.parametrize("c", range(6))
@pytest.mark.parametrize("k", range(1, 6))
def test_pass_at_k_and_pass_hat_k_exact(c, k):
    assert pass_at_k(5, c, k) == pytest.approx(float(PASS_AT[c][k - 1]), abs=1e-12)
    assert pass_hat_k(5, c, k) == pytest.approx(float(PASS_HAT[c][k - 1]), abs=1e-12)


def test_k_larger_than_n_is_refused():
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def _graded(pid: str, passed: bool, line: int) -> GradedRecord:
    status = Status.passed if passed else Status.failed
    result = GraderResult(name="g", status=status, passed=passed, score=float(passed))
    return graded(line, Record(id=pid, output="x"), result)


def test_summarise_groups_by_id_and_averages():
    records = [_graded("a", p, i) for i, p in enumerate([True, False, True, False, False])]
    records += [_graded("b", p, 10 + i) for i, p in enumerate([True, True])]
    report = summarise_trials(records, 3)
    a, b = report.prompts
    assert (a.n, a.c, a.pass_rate) == (5, 2, 0.4)
    assert a.pass_at_k["2"] == pytest.approx(0.7) and a.pass_hat_k["2"] == pytest.approx(0.1)
    assert set(b.pass_at_k) == {"1", "2"}  # k <= n only
    assert report.overall.pass_at_k["1"] == pytest.approx((0.4 + 1.0) / 2)
    assert report.overall.pass_at_k["3"] == pytest.approx(a.pass_at_k["3"])  # only a has n >= 3
    assert report.overall.prompts == 2 and report.overall.trials == 7
    doc = report.model_dump()
    assert set(doc) == {"k", "prompts", "overall"}
    assert set(doc["prompts"][0]) == {"id", "n", "c", "pass_rate", "pass_at_k", "pass_hat_k"}


def _items(n: int) -> list[ReviewItem]:
    return [
        ReviewItem(
            id=f"r{i}",
            line=i,
            input="q",
            output="a",
            passed=i % 3 == 0,
            status=Status.passed if i % 3 == 0 else Status.failed,
            score=0.0,
        )
        for i in range(1, n + 1)
    ]


def test_calibration_sample_is_reproducible():
    items = _items(30)
    one, two = sample(items, 5, seed=7), sample(items, 5, seed=7)
    assert [i.id for i in one] == [i.id for i in two]
    assert all(not i.passed for i in one) and len(one) == 5
    assert [i.id for i in sample(items, 5, seed=8)] != [i.id for i in one]
    both = sample(items, 3, seed=1, include_passes=True)
    assert sum(i.passed for i in both) == 3 and len(both) == 6
    assert [i.line for i in both] == sorted(i.line for i in both)


def test_review_sheet_side_by_side():
    items = sample(_items(6), 2, seed=0)
    second = {items[0].line: (True, 1.0, "fine"), items[1].line: (False, 0.0, "bad")}
    sheet = review_sheet(items, "graded.jsonl", 0, second)
    assert "Agreement with the second grader: 1/2 (50%)" in sheet
    assert "| second | PASS | 1.00 | fine |" in sheet and "**DISAGREE**" in sheet


def test_bad_record_line_names_file_line_and_field(tmp_path):
    path = write(tmp_path / "r.jsonl", '{"id": "a", "output": "x"}\n{"output": "y"}\n')
    with pytest.raises(ConfigError) as err:
        read_records(path)
    assert (err.value.line, err.value.field) == (2, "id")
