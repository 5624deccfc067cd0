"""`bench/bench_recall.py --dataset DIR`: recall measured on conversations of the user's own choosing.

A folder it cannot measure is refused with the reason before any pipeline runs; a folder it can
becomes one being per conversation with that conversation's questions of categories 1-4.
"""

import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_recall  # noqa: E402
from locomo_files import write_conversation  # noqa: E402


def _conversation(folder: Path, stem: str, categories=(1, 2, 5)) -> Path:
    sessions = [
        (
            "1:56 pm on 8 May, 2023",
            [
                {"speaker": "Ines", "dia_id": "D1:1", "text": "I started pottery classes."},
                {"speaker": "Omar", "dia_id": "D1:2", "text": "Nice, what did you make?"},
            ],
        ),
        (
            "10:00 am on 12 June, 2023",
            [
                {
                    "speaker": "Ines",
                    "dia_id": "D2:1",
                    "text": "A bowl for my sister.",
                    "blip_caption": "a photo of a blue bowl",
                }
            ],
        ),
    ]
    qa = [{"question": f"Question of category {c}?", "evidence": ["D1:1"], "category": c} for c in categories]
    return write_conversation(folder, stem, sessions, qa)


def test_a_folder_of_conversations_becomes_one_being_each_with_its_questions(tmp_path):
    _conversation(tmp_path, "conv-7")
    _conversation(tmp_path, "conv-8", categories=(3, 4))
    (tmp_path / "notes.json").write_text("{}")  # not a conv-*.json: not read

    assert bench_recall.dataset_error(tmp_path) is None
    convs = bench_recall.conversations(tmp_path)

    assert [c.being for c in convs] == ["locomo-conv-7", "locomo-conv-8"]
    # Category 5 (adversarial: no evidence to find) is left out.
    assert [q["category"] for q in convs[0].questions] == [1, 2]
    assert [q["category"] for q in convs[1].questions] == [3, 4]
    # Recency counts from the conversation's own time: its last turn + 1 day.
    assert convs[0].now == datetime(2023, 6, 13, 10, 0)


def test_a_folder_that_cannot_be_measured_is_refused_with_its_reason(tmp_path, capsys):
    assert "is not a folder" in bench_recall.dataset_error(tmp_path / "missing")

    _conversation(tmp_path, "conv-1")
    assert "needs at least two" in bench_recall.dataset_error(tmp_path)

    broken = tmp_path / "conv-2.json"
    broken.write_text('{"conversation": {"session_1_date_time": "yesterday"')
    assert "conv-2.json is not a LoCoMo conversation (JSONDecodeError" in bench_recall.dataset_error(tmp_path)

    broken.write_text(json.dumps({"conversation": {"session_1_date_time": "noon, 8 May"}, "qa": []}))
    assert "conv-2.json is not a LoCoMo conversation (ValueError" in bench_recall.dataset_error(tmp_path)

    empty = {"conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": []}, "qa": []}
    broken.write_text(json.dumps(empty))
    assert (
        "conv-2.json is not a LoCoMo conversation (ValueError: it has no turns)"
        in bench_recall.dataset_error(tmp_path)
    )

    _conversation(tmp_path, "conv-2", categories=(5,))
    assert "conv-2.json has 3 turns and 0 questions of categories 1-4" in bench_recall.dataset_error(tmp_path)

    # The command says why and stops before it makes a home or runs a job.
    assert bench_recall.main(["--dataset", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_recall: ") and "0 questions of categories 1-4" in err


def test_the_releases_one_file_of_conversations_is_read_as_well(tmp_path, monkeypatch, capsys):
    """LoCoMo ships its conversations as one JSON list (data/locomo10.json), each entry with its
    sample_id: `--dataset` takes that file as it is, one being per entry."""
    for stem, categories in (("conv-7", (1, 2)), ("conv-8", (3, 4))):
        _conversation(tmp_path, stem, categories)
    entries = [
        {"sample_id": stem, **json.loads((tmp_path / f"{stem}.json").read_text())}
        for stem in ("conv-7", "conv-8")
    ]
    release = tmp_path / "locomo10.json"
    release.write_text(json.dumps(entries))

    assert bench_recall.dataset_error(release) is None
    convs = bench_recall.conversations(release)
    assert [c.being for c in convs] == ["locomo-conv-7", "locomo-conv-8"]
    assert [[q["category"] for q in c.questions] for c in convs] == [[1, 2], [3, 4]]

    def seen(cs):
        return [(c.being, c.questions, c.now) for c in cs]

    assert seen(convs) == seen(bench_recall.conversations(tmp_path))  # as the folder of files gives them

    # Names come from the entries, and must be distinct; an entry that is no conversation is named.
    release.write_text(json.dumps([entries[0], entries[0]]))
    assert "names conv-7 more than once" in bench_recall.dataset_error(release)
    release.write_text(json.dumps([entries[0], ["not", "a", "conversation"]]))
    assert "locomo10.json [locomo10-2] is not a LoCoMo conversation" in bench_recall.dataset_error(release)
    release.write_text("[{")
    assert "locomo10.json is not a LoCoMo file (JSONDecodeError" in bench_recall.dataset_error(release)

    # Conversations the defaults were tuned on are named as such when they come with others.
    monkeypatch.setattr(bench_recall.locomo, "DATASET", tmp_path)
    release.write_text(json.dumps([entries[1], {**entries[0], "sample_id": "conv-9"}]))
    assert bench_recall.tuning_overlap(release) == ["conv-8"]
    assert bench_recall.tuning_overlap(tmp_path) == []
    # --held-out leaves them out: here one conversation is left, too few, and nothing runs.
    assert [c.being for c in bench_recall.conversations(release, ["CONV-8"])] == ["locomo-conv-9"]
    assert bench_recall.main(["--dataset", str(release), "--held-out"]) == 2
    assert "holds 1 conversation(s) outside the tuning set" in capsys.readouterr().err
    assert bench_recall.main(["--dataset", str(tmp_path), "--held-out"]) == 2
    assert "is the tuning set; --held-out would leave nothing" in capsys.readouterr().err


def test_the_hits_are_also_given_per_question_category_over_every_conversation(tmp_path):
    _conversation(tmp_path, "conv-7")  # categories 1 and 2 (5 is left out)
    _conversation(tmp_path, "conv-8", categories=(1, 4))
    convs = bench_recall.conversations(tmp_path)
    score = bench_recall.Score()
    found, other = [["D1:1"]], [["D2:1"]]  # the evidence (D1:1) first, or only another turn
    score.add("locomo-conv-7", 0, {"D1:1"}, found)  # category 1: first
    score.add("locomo-conv-7", 1, {"D1:1"}, other)  # category 2: not found
    score.add("locomo-conv-8", 0, {"D1:1"}, other * 6 + found)  # category 1: seventh
    score.add("locomo-conv-8", 1, {"D1:1"}, other + found)  # category 4: second

    assert bench_recall.by_category(score, convs) == {
        1: (2, {1: 0.5, 5: 0.5, 10: 1.0}),
        2: (1, {1: 0.0, 5: 0.0, 10: 0.0}),
        4: (1, {1: 0.0, 5: 1.0, 10: 1.0}),
    }


def test_the_hits_are_also_given_by_whether_plain_bm25_and_cosine_find_the_evidence(tmp_path):
    _conversation(tmp_path, "conv-7")
    _conversation(tmp_path, "conv-8", categories=(1, 4))
    convs = bench_recall.conversations(tmp_path)
    found, other = [["D1:1"]], [["D2:1"]]
    first, tenth, eleventh, never = found, other * 9 + found, other * 10 + found, other
    questions = [("locomo-conv-7", 0), ("locomo-conv-7", 1), ("locomo-conv-8", 0), ("locomo-conv-8", 1)]

    def score_of(*answers):
        score = bench_recall.Score()
        for (being, index), sources in zip(questions, answers, strict=True):
            score.add(being, index, {"D1:1"}, sources)
        return score

    bm25 = score_of(first, tenth, eleventh, never)  # finds the first two in its top 10
    cosine = score_of(never, first, first, eleventh)  # finds the second and the third
    method = score_of(tenth, first, other + found, never)

    assert bench_recall.by_baselines(method, convs, bm25, cosine) == {
        (False, False): (1, {1: 0.0, 5: 0.0, 10: 0.0}),
        (False, True): (1, {1: 0.0, 5: 1.0, 10: 1.0}),
        (True, False): (1, {1: 0.0, 5: 0.0, 10: 1.0}),
        (True, True): (1, {1: 1.0, 5: 1.0, 10: 1.0}),
    }
    # Found at the eleventh place is not found in the top 10. In their top 5 instead, BM25 misses
    # the second question (its tenth) and joins it to the third, which cosine alone finds.
    assert bench_recall.by_baselines(method, convs, bm25, cosine, k=5)[False, True] == (
        2,
        {1: 0.5, 5: 1.0, 10: 1.0},
    )
