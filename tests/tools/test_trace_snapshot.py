"""The refactor check: a snapshot drops timing, and a planted difference is found and named."""
from playground.tools import trace_snapshot as ts


def test_strip_drops_timing_and_ignored_keys_at_any_depth():
    trace = {"timing": {"prefill": 1.0}, "steps": [{"elapsed": 0.3, "token": 4, "stages": [{"new": 1, "kept": 2}]}]}
    assert ts.strip(trace, ("new",)) == {"steps": [{"token": 4, "stages": [{"kept": 2}]}]}


def test_first_difference_names_the_path():
    a = {"steps": [{"token": 4}, {"token": 5}]}
    assert ts.first_difference(a, a) is None
    assert ts.first_difference(a, {"steps": [{"token": 4}, {"token": 6}]}) == ".steps[1].token: 5 vs 6"
    assert ts.first_difference(a, {"steps": [{"token": 4}]}) == ".steps (length 2 vs 1)"
    assert "only after" in ts.first_difference({}, {"x": 1})


def test_toy_snapshot_compares_equal_to_itself_and_not_to_a_changed_one(tmp_path):
    first = tmp_path / "a.json"
    assert ts.main(["--models", "toy", "--out", str(first)]) == 0
    assert ts.main(["--models", "toy", "--out", str(tmp_path / "b.json"), "--compare", str(first)]) == 0
    text = first.read_text().replace('"token_ids": [', '"token_ids": [99, ', 1)
    first.write_text(text)
    assert ts.main(["--models", "toy", "--out", str(tmp_path / "c.json"), "--compare", str(first)]) == 1


def test_every_stage_that_reads_parameters_has_its_request():
    """The snapshot switches each stage on by its registration's ``on`` values: a new stage is in it unasked."""
    from strategies.stages import STAGES

    assert set(ts.STAGES_ON) == {name for name, spec in STAGES.items() if spec.params}
    names = {name for name, _ in ts.requests("toy")}
    assert {f"toy/sampling/{s}" for s in ts.STAGES_ON if s not in ts.TOY_ONLY} <= names
