"""Runs and evaluations keep every answer: unique ids, journals keyed on the question text, outputs checked first.

Issue #30, items 3 and 5: two questions under one id, a journal answer reused for edited text, and
an evaluation whose finished answers were deleted because ``--json``'s folder was a file.
"""

from __future__ import annotations

import errno
import json
import shlex
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from _experiments import COMPLEX, PLAN, items
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from crag_lab import CragConfig, Lab
from crag_lab._paths import OutputPathError, check_output, check_outputs, write_text
from crag_lab.cli import main
from crag_lab.errors import DuplicateIdError
from crag_lab.eval import EvalQuery, EvalSet, evaluate
from crag_lab.journal import JournalTextChangedWarning, RunJournal
from crag_lab.records import query_rows
from crag_lab.replay import Experiment
from crag_lab.testing import ScriptedLLM, StaticTool

SCRIPT = {"analyze": COMPLEX, "plan": PLAN, "grade": "[0.9, 0.8, 0.2, 0.1]", "synthesize": "A [1]."}
IDS = st.text(alphabet="abcq0123", min_size=1, max_size=3)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_lab() -> tuple[Lab, ScriptedLLM]:
    llm = ScriptedLLM(SCRIPT)
    return Lab([StaticTool("vector_search", items(4))], llm=llm, config=CragConfig(model_retries=0)), llm


def asked(llm: ScriptedLLM) -> list[str]:
    return [c["prompt"].split("Question: ")[1].split("\n")[0] for c in llm.calls_for("analyze")]


# ---- item 3: two questions under one id -------------------------------------------------------------


@st.composite
def ids_with_duplicates(draw: st.DrawFn) -> tuple[list[str], set[str]]:
    """A list of ids in which at least one id occurs twice or more; and the set of those ids."""
    ids = draw(st.lists(IDS, min_size=1, max_size=8))
    extra = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=4))
    shuffled = draw(st.permutations(ids + extra))
    return shuffled, {i for i in shuffled if shuffled.count(i) > 1}


@FAST
@given(ids_with_duplicates())
def test_a_run_with_a_shared_id_is_refused_naming_every_shared_id_before_any_model_call(
    case: tuple[list[str], set[str]],
) -> None:
    ids, shared = case
    lab, llm = make_lab()
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "run.journal.jsonl"
        with pytest.raises(DuplicateIdError) as info:
            lab.run([{"id": i, "question": f"question {n}?"} for n, i in enumerate(ids)], journal=journal)
        assert not journal.exists()  # refused before the journal is opened
    assert llm.calls == []
    message = str(info.value)
    assert "\n" not in message and "give each question its own id" in message
    for query_id in shared:
        assert repr(query_id) in message
    for query_id in set(ids) - shared:
        assert f"{query_id!r} (queries" not in message


@FAST
@given(st.lists(IDS, min_size=1, max_size=8, unique=True))
def test_unique_ids_run_as_given_one_record_per_question(ids: list[str]) -> None:
    rows = query_rows([{"id": i, "question": f"question {n}?"} for n, i in enumerate(ids)])
    assert [r["id"] for r in rows] == ids


def test_a_generated_id_that_clashes_with_a_given_one_is_refused() -> None:
    with pytest.raises(DuplicateIdError, match=r"'q001' \(queries #1, #2\)"):
        query_rows(["Which port?", {"id": "q001", "question": "Who owns it?"}])


def test_evaluate_refuses_a_dataset_with_a_shared_id_naming_it_and_the_file() -> None:
    lab, llm = make_lab()
    data = EvalSet("tiny", [EvalQuery("q1", "Which port?"), EvalQuery("q2", "Who?"), EvalQuery("q1", "Where?")],
                   Path("tiny.jsonl"))
    with pytest.raises(DuplicateIdError, match=r"tiny\.jsonl has 1 id .*'q1' \(queries #1, #3\)"):
        evaluate(lab, data, modes=["knowledge_base", "naive_rag"])
    assert llm.calls == []


# ---- item 3: a journal answer reused only for the same question text -----------------------------------

QUESTION = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
                   min_size=1, max_size=30).filter(lambda t: t.strip() != "")


@FAST
@given(QUESTION, QUESTION)
def test_a_journal_answer_is_reused_only_for_the_same_question_text(original: str, edited: str) -> None:
    [first_row] = query_rows([{"id": "q1", "question": original}])
    [edited_row] = query_rows([{"id": "q1", "question": edited}])
    assume(first_row["question"] != edited_row["question"])  # the same text after NFC is the same question
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "run.journal.jsonl"
        first, _ = make_lab()
        first.run([{"id": "q1", "question": original}, {"id": "q2", "question": "unchanged?"}], journal=journal)

        again, llm = make_lab()
        with pytest.warns(JournalTextChangedWarning, match=r"'q1'") as caught:
            exp = again.run([{"id": "q1", "question": edited}, {"id": "q2", "question": "unchanged?"}], journal=journal)
        assert "'q2'" not in str(caught[0].message)
        assert len(llm.calls_for("analyze")) == 1  # q1 asked again, q2 reused
        assert [r["query"] for r in exp.records] == [edited_row["question"], "unchanged?"]

        lines = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()[1:]]
        assert [(r["id"], r["query"]) for r in lines] == [("q1", first_row["question"]), ("q2", "unchanged?"),
                                                          ("q1", edited_row["question"])]  # appended, none dropped

        back, llm = make_lab()  # the original text again: its answer is still there
        with warnings.catch_warnings():
            warnings.simplefilter("error", JournalTextChangedWarning)
            exp = back.run([{"id": "q1", "question": original}], journal=journal)
        assert llm.calls == [] and exp.records[0]["query"] == first_row["question"]


def test_an_nfd_spelling_of_the_same_question_reuses_its_answer(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal.jsonl"
    make_lab()[0].run([{"id": "q1", "question": "Is the office in S\u00e3o Paulo?"}], journal=journal)
    lab, llm = make_lab()
    with warnings.catch_warnings():
        warnings.simplefilter("error", JournalTextChangedWarning)
        lab.run([{"id": "q1", "question": "Is the office in Sa\u0303o Paulo?"}], journal=journal)
    assert llm.calls == []


# ---- item 5: output paths checked before the first question -----------------------------------------


def test_check_output_names_the_path_and_the_fix_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("not a folder")
    (tmp_path / "adir").mkdir()
    with pytest.raises(OutputPathError, match=r"--json .*results/eval\.json: .*results is a file, not a folder"):
        check_output(tmp_path / "results" / "eval.json", what="--json")
    with pytest.raises(OutputPathError, match=r"--json .*results/deeper/eval\.json: .*results is a file"):
        check_output(tmp_path / "results" / "deeper" / "eval.json", what="--json")
    with pytest.raises(OutputPathError, match=r"--markdown .*adir: is a folder, not a file"):
        check_output(tmp_path / "adir", what="--markdown")
    with pytest.raises(OutputPathError, match=r"--save-runs .*results: is a file, not a folder"):
        check_output(tmp_path / "results", what="--save-runs", folder=True)
    with pytest.raises(OutputPathError, match="writes to the same path"):
        check_outputs([("--json", tmp_path / "out", False), ("--markdown", tmp_path / "out", False)])
    assert check_output(tmp_path / "new" / "deep" / "eval.json", what="--json") == tmp_path / "new/deep/eval.json"
    assert not (tmp_path / "new").exists()


def test_a_result_is_written_whole_or_not_at_all_and_through_a_link(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "eval.json"
    link.symlink_to(tmp_path / "real" / "eval.json")
    write_text(link, "first")
    assert link.is_symlink() and (tmp_path / "real" / "eval.json").read_text(encoding="utf-8") == "first"

    def disk_full(self: Path, target: Any) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_text(link, "second")
    assert (tmp_path / "real" / "eval.json").read_text(encoding="utf-8") == "first"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["eval.json"]  # no temporary file left


def test_a_users_file_named_like_a_temporary_file_survives_every_write(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The names the writers used before: ".eval.json.tmp" (results) and "run.jsonl.tmp" (experiments).
    drafts = {tmp_path / ".eval.json.tmp": "my draft", tmp_path / "run.jsonl.tmp": "my notes"}
    for path, text in drafts.items():
        path.write_text(text, encoding="utf-8")
    write_text(tmp_path / "eval.json", "first")
    Experiment(CragConfig(), []).save(tmp_path / "run.jsonl")

    def disk_full(self: Path, target: Any) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_text(tmp_path / "eval.json", "second")
    with pytest.raises(OSError, match="No space left"):
        Experiment(CragConfig(), []).save(tmp_path / "run.jsonl")
    assert {path: path.read_text(encoding="utf-8") for path in drafts} == drafts
    assert sorted(p.name for p in tmp_path.iterdir()) == [".eval.json.tmp", "eval.json", "run.jsonl", "run.jsonl.tmp"]


def test_a_journal_whose_folder_is_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("x")
    lab, llm = make_lab()
    with pytest.raises(OutputPathError, match=r"run journal .*runs/j\.jsonl: .*runs is a file"):
        lab.run(["Which port?"], journal=tmp_path / "runs" / "j.jsonl")
    assert llm.calls == []
    with pytest.raises(OutputPathError, match="is a folder"):
        RunJournal(tmp_path, config=CragConfig(), mode="knowledge_base", model={"name": "m"})


CORPUS = [
    {"id": "d1", "title": "Gateway", "text": "The gateway accepts public TLS traffic on port 8443."},
    {"id": "d2", "title": "Lunch", "text": "The canteen serves lunch from noon until two."},
]
QUERIES = [
    {"id": "q1", "question": "On which port does the gateway accept TLS traffic?", "answers": ["8443"],
     "answerable": True},
    {"id": "q2", "question": "Who is the data protection officer?", "answers": [], "answerable": False},
]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A two-question BEIR-style folder (as tests/test_eval_cli.py)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CORPUS), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUERIES), encoding="utf-8")
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\nq1\td1\t1\n", encoding="utf-8")
    return folder


@pytest.fixture
def questions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The questions `Lab.record` answers (every question a run asks), and an instant embedding model."""
    from conftest import HashEmbedding

    import crag_lab.embeddings

    monkeypatch.setattr(crag_lab.embeddings, "default_embed_model", lambda: HashEmbedding())
    seen: list[str] = []
    record = Lab.record

    def spy(self: Lab, row: Any, **kwargs: Any) -> Any:
        seen.append(row["question"])
        return record(self, row, **kwargs)

    monkeypatch.setattr(Lab, "record", spy)
    return seen


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--json", "results/eval.json", "results is a file, not a folder"),
    ("--markdown", "adir", "adir: is a folder, not a file"),
    ("--csv", "results/q.csv", "results is a file, not a folder"),
    ("--save-runs", "results", "results: is a file, not a folder"),
    ("--save-runs", "runs", "runs/tiny-naive_rag.jsonl: is a folder, not a file"),
    ("--journal-dir", "results/journal", "results is a file, not a folder"),
])
def test_eval_with_an_unwritable_output_fails_before_the_first_question_in_one_line(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    option: str, value: str, named: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("results").write_text("a file where a folder should be")
    Path("adir").mkdir()
    Path("runs/tiny-naive_rag.jsonl").mkdir(parents=True)

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(Lab, "from_directory", no_model)
    rc = main(["eval", "--dataset", str(tiny), "--mode", "naive_rag", "--cache-dir", "cache", "--journal-dir", "journal",
               option, value, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"crag-lab: {option} {value}")
    assert named in err


def test_eval_with_a_shared_id_in_the_dataset_fails_before_the_model_loads(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    with (tiny / "queries.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "q1", "question": "Which port again?", "answers": ["8443"]}) + "\n")
    monkeypatch.setattr(Lab, "from_directory", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = main(["eval", "--dataset", str(tiny), "--mode", "naive_rag", "--cache-dir", str(tmp_path / "c"),
               "--journal-dir", str(tmp_path / "j"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "'q1' (queries #1, #3)" in err and len(err.splitlines()) == 1


def test_evaluate_keeps_a_finished_modes_journal_when_a_later_mode_is_interrupted(tmp_path: Path,
                                                                                  questions: list[str]) -> None:
    lab, _ = make_lab()
    data = EvalSet("tiny", [EvalQuery("q1", "Which port?"), EvalQuery("q2", "Who?")], Path("tiny.jsonl"))
    run = Lab.run

    def interrupted(self: Lab, rows: Any, **kwargs: Any) -> Any:
        if kwargs["mode"] == "naive_rag":
            raise KeyboardInterrupt
        return run(self, rows, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Lab, "run", interrupted)
        with pytest.raises(KeyboardInterrupt):
            evaluate(lab, data, modes=["knowledge_base", "naive_rag"], journal_dir=tmp_path)
    assert (tmp_path / "tiny-knowledge_base.journal.jsonl").exists()
    questions.clear()
    evaluate(lab, data, modes=["knowledge_base", "naive_rag"], journal_dir=tmp_path)
    assert questions == ["Which port?", "Who?"]  # naive_rag only: knowledge_base came from its journal
    assert list(tmp_path.iterdir()) == []  # every mode finished: the journals are removed


@pytest.mark.parametrize("failure", ["a file where the folder goes", "disk full"])
def test_a_write_that_fails_after_the_run_keeps_the_journals_and_the_printed_command_writes_the_results(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    questions: list[str], failure: str,
) -> None:
    import crag_lab._paths
    import crag_lab.eval.runner

    monkeypatch.chdir(tmp_path)
    real = crag_lab.eval.runner.evaluate

    def then_the_write_fails(*args: Any, **kwargs: Any) -> Any:
        ev = real(*args, **kwargs)
        if failure == "disk full":
            def no_space(path: Any, text: str) -> Path:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(crag_lab._paths, "write_text", no_space)
        else:
            Path("results").write_text("made a file while the run ran")  # the folder cannot be made any more
        return ev

    monkeypatch.setattr(crag_lab.eval.runner, "evaluate", then_the_write_fails)
    argv = ["eval", "--dataset", str(tiny), "--mode", "naive_rag", "--mode", "knowledge_base", "--cache-dir", "cache",
            "--journal-dir", "journal dir", "--json", "results/eval.json", "--markdown", "report.md", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "could not write --json results/eval.json" in err
    journals = sorted(Path("journal dir").iterdir())
    assert [p.name for p in journals] == ["tiny-knowledge_base.journal.jsonl", "tiny-naive_rag.journal.jsonl"]
    assert all(str(p) in err for p in journals)
    assert all(len(p.read_text(encoding="utf-8").splitlines()) == 1 + len(QUERIES) for p in journals)
    assert len(questions) == 2 * len(QUERIES)

    command = err.split("only writes the results: ", 1)[1]
    assert shlex.split(command) == ["crag-lab", *argv]
    assert failure != "disk full" or "No space left on device" in err
    monkeypatch.setattr(crag_lab.eval.runner, "evaluate", real)  # the disk has room again / the file is moved
    monkeypatch.setattr(crag_lab._paths, "write_text", write_text)
    Path("results").unlink(missing_ok=True)
    questions.clear()
    assert main(shlex.split(command)[1:]) == 0
    assert questions == []  # nothing asked again: every answer came from the journals
    result = json.loads(Path("results/eval.json").read_text(encoding="utf-8"))
    assert result["n_queries"] == len(QUERIES) and set(result["modes"]) == {"naive_rag", "knowledge_base"}
    assert Path("report.md").exists()
    assert list(Path("journal dir").iterdir()) == []  # written: the journals are removed
