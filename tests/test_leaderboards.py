import json

import pytest

from leaderboards.build import build
from leaderboards.records import Record, load_records, write_record


def test_records_round_trip_and_table_is_sorted_by_accuracy(tmp_path):
    for name, acc in (("weak", 0.2), ("strong", 0.6)):
        write_record(Record(name=name, env_id="marft/Arithmetic-v0", env_kwargs={"level": 1},
                            algorithm="marft_a", model="m", eval_after={"accuracy": acc, "stderr": 0.03, "n": 200, "greedy": True}),
                     tmp_path)
    records = load_records(tmp_path)
    assert {r["name"] for r in records} == {"weak", "strong"} and all(r["commit"] is not None for r in records)
    table = build(tmp_path)
    assert table.index("| strong |") < table.index("| weak |")
    assert "60.0 +- 3.0 (n=200)" in table


def test_incomplete_record_is_rejected_with_its_path(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"name": "bad"}))
    with pytest.raises(ValueError, match="bad.json"):
        load_records(tmp_path)
