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
