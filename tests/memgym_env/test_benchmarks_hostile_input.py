"""Benchmark and world files built to hurt: deep nesting, oversized input, wrongly typed fields.
Each fault is one error naming the file (and the record and field where there is one)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from membuilder.plumbing.json_files import DepthScanner, JSONLimitError, check_depth, load_json_file
from memgym_env.benchmarks import BadRecordError, Problems
from memgym_env.benchmarks.locomo import read_locomo
from memgym_env.benchmarks.longmemeval import read_longmemeval
from memgym_env.benchmarks.perltqa import read_perltqa
from memgym_env.world.data_json import read_world
from memgym_env.world.types import WorldError

NESTED = "[" * 100_000 + "]" * 100_000  # 200 KB


def test_deeply_nested_longmemeval_fails_fast_under_a_memory_limit(tmp_path):
    path = tmp_path / "longmemeval_s.json"
    path.write_text(NESTED)
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from memgym_env.benchmarks import BadRecordError, Problems
        from memgym_env.benchmarks.longmemeval import read_longmemeval
        try:
            read_longmemeval({str(path)!r})
        except BadRecordError as exc:
            print("ERROR", exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith(f"ERROR {path}: JSON nested deeper than")


def test_deeply_nested_locomo_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(NESTED)
    with pytest.raises(BadRecordError, match=f"{path}: JSON nested deeper than 200 levels"):
        read_locomo(path)


def test_deeply_nested_gzip_is_caught_too(tmp_path):
    path = tmp_path / "longmemeval_s.json.gz"
    path.write_bytes(gzip.compress(NESTED.encode()))
    with pytest.raises(BadRecordError, match="nested deeper"):
        read_longmemeval(path)


def test_deeply_nested_world_is_a_world_error(tmp_path):
    path = tmp_path / "world.json"
    path.write_text(NESTED)
    with pytest.raises(WorldError, match=f"{path}: JSON nested deeper"):
        read_world(path)


def test_brackets_inside_strings_and_escaped_quotes_do_not_count():
    text = '[{"a": "' + "[" * 500 + '\\" [[[ \\\\", "b": "\\\\\\"{{{{"}]'
    check_depth(text.encode(), "x", max_depth=3)
    scanner = DepthScanner("x", max_depth=3)
    for i in range(0, len(text), 3):  # chunk edges fall inside escapes
        scanner.feed(text[i:i + 3].encode())
    assert scanner.depth == 0 and not scanner.in_string


def test_depth_limit_is_exact():
    check_depth(b"[" * 5 + b"]" * 5, "x", max_depth=5)
    with pytest.raises(JSONLimitError, match="at byte 5"):
        check_depth(b"[" * 6 + b"]" * 6, "x", max_depth=5)


def test_a_whole_file_read_is_size_limited(tmp_path):
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(b"[" + b"0," * 5000 + b"0]"))
    with pytest.raises(JSONLimitError, match="once decompressed"):
        load_json_file(path, max_bytes=1000)


# ---- wrongly typed fields: one error naming file, record and field; --skip-bad skips the record ----
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _locomo(tmp_path, change):
    sample = json.loads((DATA / "locomo" / "locomo10_conv-26.json").read_text())
    sample = sample[0] if isinstance(sample, list) else sample
    change(sample)
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


LOCOMO_FAULTS = {
    "session_1[0]: field 'text' must be text": lambda s: s["conversation"]["session_1"][0].update(text=5),
    "qa[0]: field 'adversarial_answer' must be text or a number": lambda s: s["qa"][0].update(adversarial_answer=["x"]),
    "sample conv-26: field 'speaker_a' must be text": lambda s: s["conversation"].update(speaker_a=["x"]),
    "field 'session_1_date_time' must be text": lambda s: s["conversation"].update(session_1_date_time=5),
    "qa[0]: 'evidence' is not a list of turn ids": lambda s: s["qa"][0].update(evidence=[["D1:3"]]),
}


@pytest.mark.parametrize("message", list(LOCOMO_FAULTS))
def test_wrongly_typed_locomo_fields_are_named_and_skippable(tmp_path, message):
    path = _locomo(tmp_path, LOCOMO_FAULTS[message])
    with pytest.raises(BadRecordError, match=re.escape(f"LoCoMo file {path}, ") + ".*" + re.escape(message)):
        read_locomo(path)
    problems = Problems(skip_bad=True)
    read_locomo(path, problems)
    assert problems.count == 1 and message in problems.messages[0]


LONGMEMEVAL_FAULTS = {
    "field 'answer_session_ids' must be a list of session ids": lambda r: r.update(answer_session_ids=5),
    "haystack_session_ids[0]: must be text": lambda r: r.update(haystack_session_ids=[["x"]] * len(r["haystack_dates"])),
    "haystack_dates[0]: must be text": lambda r: r.update(haystack_dates=[5] * len(r["haystack_dates"])),
    "field 'question_date' must be text": lambda r: r.update(question_date=["x"]),
}


@pytest.mark.parametrize("message", list(LONGMEMEVAL_FAULTS))
def test_wrongly_typed_longmemeval_fields_are_named_and_skippable(tmp_path, message):
    records = json.loads((DATA / "longmemeval" / "longmemeval_oracle_sample.json").read_text())[:2]
    LONGMEMEVAL_FAULTS[message](records[0])
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps(records))
    with pytest.raises(BadRecordError, match=re.escape(f"LongMemEval file {path}, question {records[0]['question_id']}")
                       + ".*" + re.escape(message)):
        read_longmemeval(path)
    problems = Problems(skip_bad=True)
    assert [c.id for c in read_longmemeval(path, problems)] == [records[1]["question_id"]]
    assert problems.count == 1


def _perltqa_character(name: str) -> tuple[dict, dict]:
    """A small hand-made PerLTQA character: its memories and its questions, one of each kind."""
    memories = {
        "profile": {"Name": name, "Age": 30, "Occupation": "nurse"},
        "profile_description": f"{name} is a nurse in Leeds.",
        "social_relationship": {"0": {"Supporting Characters": "Bob", "Relationship": "friend",
                                      "Description": f"Bob is {name}'s oldest friend."}},
        "events": {"1_0": {"content": f"{name} moved to Leeds.", "summary": "A move", "Characters": [name, "Bob"],
                           "Creation Time": "May 12, 2022", "Theme": "home"}},
        "dialogues": {"1_0_0": {"events": "1_0", "contents": {"2022-05-12 10:00": [f"{name}: I moved.", "Bob: Great!"]}}},
    }

    def qa(question, answer, ref):
        return {"Question": question, "Answer": answer, "Reference Memory": ref, "Memory Anchors": [{answer: [0, 2]}]}

    questions = {
        "profile": [qa(f"How old is {name}?", "30", "Age")],
        "social_relationship": [{"0": [qa(f"Who is {name}'s friend?", "Bob", "['0']")]}],
        "events": [{"1_0": [qa(f"Where did {name} move?", "Leeds", "['1_0']")]}],
        "dialogues": [{"1_0_0": [qa("Who said great?", "Bob", "['1_0_0']")]}],
    }
    return memories, questions


# message after the character's name: (the file the fault is in, the fault (changes the character's
# part in place, or returns what replaces it), whether the character survives --skip-bad)
PERLTQA_FAULTS = {
    "profile: field 'Age' must be text or a number, got list": ("mem", lambda m: m["profile"].update(Age=[30]), True),
    "field 'profile_description' must be text, got int": ("mem", lambda m: m.update(profile_description=5), True),
    "field 'social_relationship' must be an object keyed by id, got list":
        ("mem", lambda m: m.update(social_relationship=[{"Description": "x"}]), True),
    "field 'events' must be an object keyed by id, got str": ("mem", lambda m: m.update(events="1_0"), True),
    "social_relationship 0: field 'Relationship' must be text, got list":
        ("mem", lambda m: m["social_relationship"]["0"].update(Relationship=["friend"]), True),
    "event 1_0: field 'summary' must be text, got dict": ("mem", lambda m: m["events"]["1_0"].update(summary={}), True),
    "event 1_0: field 'Creation Time' must be text, got int":
        ("mem", lambda m: m["events"]["1_0"].update({"Creation Time": 2022}), True),
    "event 1_0: field 'Characters' must be a list of text, got str":
        ("mem", lambda m: m["events"]["1_0"].update(Characters="Bob"), True),
    "dialogue 1_0_0: field 'events' must be an event id, got list":
        ("mem", lambda m: m["dialogues"]["1_0_0"].update(events=["1_0"]), True),
    "expected an object of memories, got list": ("mem", lambda m: [m], False),
    "events 1_0, qa[0]: field 'Answer' must be text, got int": ("qa", lambda q: q["events"][0]["1_0"][0].update(Answer=5), True),
    "dialogues 1_0_0, qa[0]: field 'Memory Anchors' must be a list of objects, got int":
        ("qa", lambda q: q["dialogues"][0]["1_0_0"][0].update({"Memory Anchors": 7}), True),
    "events 1_0: expected a list of questions, got str": ("qa", lambda q: q["events"][0].update({"1_0": "none"}), True),
}


@pytest.mark.parametrize("message", list(PERLTQA_FAULTS))
def test_wrongly_typed_perltqa_fields_are_named_and_skippable(tmp_path, message):
    where, change, survives = PERLTQA_FAULTS[message]
    (ann_mem, ann_qa), (cy_mem, cy_qa) = _perltqa_character("Ann"), _perltqa_character("Cy")
    if where == "mem":
        ann_mem = change(ann_mem) or ann_mem
    else:
        ann_qa = change(ann_qa) or ann_qa
    mem_path, qa_path = tmp_path / "perltmem_en_v2.json", tmp_path / "perltqa_en_v2.json"
    mem_path.write_text(json.dumps({"Ann": ann_mem, "Cy": cy_mem}))
    qa_path.write_text(json.dumps([{"Ann": ann_qa, "Cy": cy_qa}]))
    named = f"PerLTQA {'memory' if where == 'mem' else 'QA'} file {mem_path if where == 'mem' else qa_path}, character Ann"
    with pytest.raises(BadRecordError, match=re.escape(named) + ".*" + re.escape(message)):
        read_perltqa(mem_path, qa_path)
    problems = Problems(skip_bad=True)
    conversations = read_perltqa(mem_path, qa_path, problems)
    assert problems.count == 1 and message in problems.messages[0]
    assert [c.id for c in conversations] == (["Ann", "Cy"] if survives else ["Cy"])
    assert len(conversations[-1].qa) == 4  # Cy, untouched, keeps every question


def test_the_hand_made_perltqa_files_read_cleanly(tmp_path):
    (ann_mem, ann_qa) = _perltqa_character("Ann")
    mem_path, qa_path = tmp_path / "perltmem_en_v2.json", tmp_path / "perltqa_en_v2.json"
    mem_path.write_text(json.dumps({"Ann": ann_mem}))
    qa_path.write_text(json.dumps([{"Ann": ann_qa}]))
    [conv] = read_perltqa(mem_path)
    assert [s.id for s in conv.sessions] == ["profile", "relationships", "event:1_0", "dialogue:1_0_0"]
    assert [q.session for q in conv.qa] == ["profile", "relationships", "event:1_0", "dialogue:1_0_0"]


# ---- tiny files that unpack into huge ones: each fails in under 5 s, 500 MB RSS, with a message under 1 KB ----
MiB = 1 << 20


def _gzip_repeating(path: Path, head: bytes, unit: bytes, mib: int, tail: bytes) -> Path:
    """A .gz of ``head + unit * (mib MiB worth) + tail``, made of gzip members (``gzip.open`` reads
    them as one stream), so a 2 GB text costs 1 MiB to compress and about 2 MB on disk."""
    block = gzip.compress(unit * (MiB // len(unit)), compresslevel=9)
    with path.open("wb") as fh:
        fh.write(gzip.compress(head))
        for _ in range(mib):
            fh.write(block)
        fh.write(gzip.compress(tail))
    return path


HOSTILE = {
    # reader, file name, head, repeated unit, MiB, tail, what the error says
    "longmemeval: one 2 GB string": ("longmemeval", "longmemeval_s.json.gz", b'[{"question_id": "', b"a", 2048,
                                     b'"}]', "a string longer than"),
    "longmemeval: one 2 GB number": ("longmemeval", "longmemeval_s.json.gz", b'[{"question_id": 1', b"1", 2048,
                                     b'}]', "a value longer than"),
    "longmemeval: one 1 GB record of short strings": ("longmemeval", "longmemeval_s.json.gz", b'[{"x": [', b'"' + b"a" * 29 + b'",', 1024,
                                                      b'"ab"]}]', "a record longer than"),
    "longmemeval: a 2 GB string of words": ("longmemeval", "longmemeval_s.json.gz", b'[{"question_id": "', b"ab ", 2048,
                                            b'"}]', "a string longer than"),
    "locomo: a 1 GB sample_id": ("locomo", "locomo.json.gz", b'[{"sample_id": "', b"x", 1024, b'"}]',
                                 "once decompressed"),
    "locomo: a 10 MiB sample_id (under the file's cap)": ("locomo", "locomo.json.gz", b'[{"sample_id": "', b"x", 10,
                                                         b'"}]', "a string longer than"),
    "locomo: 1 GB of empty objects": ("locomo", "locomo.json.gz", b'[', b"{},", 1024, b'{}]', "once decompressed"),
    "locomo: 15 MiB of small objects": ("locomo", "locomo.json.gz", b'[', b'{"":0},', 15, b'{}]', "more than 1000000 values"),
    "longmemeval: a 15 MiB record of small objects": ("longmemeval", "longmemeval_s.json.gz", b'[[', b'{"":0},', 15,
                                                     b'{}]]', "a record holds more than"),
    "perltqa: a 1 GB character name": ("perltqa", "perltmem_en_v2.json.gz", b'{"', b"x", 1024, b'": {}}',
                                       "once decompressed"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_tiny_files_holding_huge_text_fail_fast_in_bounded_memory(tmp_path, case):
    reader, name, head, unit, mib, tail, says = HOSTILE[case]
    path = _gzip_repeating(tmp_path / name, head, unit, mib, tail)
    assert path.stat().st_size < 4 * MiB
    call = {"longmemeval": "read_longmemeval(path)", "locomo": "read_locomo(path)",
            "perltqa": "read_perltqa(path, path)"}[reader]
    script = textwrap.dedent(f"""
        import json, resource, sys, time
        from memgym_env.benchmarks import BadRecordError
        from memgym_env.benchmarks.locomo import read_locomo
        from memgym_env.benchmarks.longmemeval import read_longmemeval
        from memgym_env.benchmarks.perltqa import read_perltqa
        path = {str(path)!r}
        def hwm():  # this process's own peak RSS in KiB: ru_maxrss keeps the forking pytest's peak across exec
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        before = hwm()
        t0 = time.perf_counter()
        try:
            {call}
            message = None
        except BadRecordError as exc:
            message = str(exc)
        seconds = time.perf_counter() - t0
        peak = hwm()
        print(json.dumps({{"message": message, "seconds": seconds, "peak_mb": peak / 1024,
                           "grew_mb": (peak - before) / 1024}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["message"] is not None and says in got["message"] and str(path) in got["message"], got["message"]
    assert len(got["message"].encode()) < 1000
    assert got["seconds"] < 5, got
    assert got["peak_mb"] < 500, got


def test_echoed_values_are_cut_to_a_few_hundred_characters(tmp_path):
    long_id = "q" * 200_000
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"sample_id": long_id, "conversation": "none", "qa": []}]))
    with pytest.raises(BadRecordError) as err:
        read_locomo(path)
    message = str(err.value)
    assert len(message) < 1000 and "(200000 characters)" in message and "no 'conversation' object" in message


def test_a_string_as_long_as_the_bound_is_read(tmp_path):
    from memgym_env.benchmarks.bounds import Bounds, check_bounds

    text = b'[{"a": "' + b"x" * 98 + b'", "b": [1, 2]}, {"c": "\\"' + b"y" * 50 + b'"}]'
    for chunk in (1, 3, 7, 1 << 20):  # chunk edges fall inside strings, escapes and records
        check_bounds(text, "x", Bounds(max_bytes=len(text), max_token=100, max_record=len(text)), chunk=chunk)
        with pytest.raises(JSONLimitError, match="a string longer than 99 bytes"):
            check_bounds(text, "x", Bounds(max_bytes=len(text), max_token=99), chunk=chunk)
        with pytest.raises(JSONLimitError, match="a record longer than 50 bytes"):
            check_bounds(text, "x", Bounds(max_bytes=len(text), max_token=100, max_record=50), chunk=chunk)


# ---- input that used to be accepted silently: one error naming file, record and field ----
def test_a_repeated_longmemeval_question_id_is_an_error(tmp_path):
    records = json.loads((DATA / "longmemeval" / "longmemeval_oracle_sample.json").read_text())[:2]
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps([records[0], records[1], records[0]]))
    qid = records[0]["question_id"]
    with pytest.raises(BadRecordError, match=re.escape(f"LongMemEval file {path}, question {qid} (record 2): field "
                                                       "'question_id' repeats record 0's")):
        read_longmemeval(path)
    problems = Problems(skip_bad=True)
    assert [c.id for c in read_longmemeval(path, problems)] == [qid, records[1]["question_id"]]
    assert problems.count == 1


SILENT_LOCOMO = {
    "sample conv-26: field 'session_2' must be a list of turns, got dict":
        lambda s: s["conversation"].update(session_2={"0": s["conversation"]["session_2"][0]}),
    "sample conv-26, qa[0]: field 'category' is True (bool), expected an integer 1-5": lambda s: s["qa"][0].update(category=True),
    "sample conv-26, qa[0]: field 'category' is 2.0 (float), expected an integer 1-5": lambda s: s["qa"][0].update(category=2.0),
    "sample #0: field 'sample_id' must be text, got none": lambda s: s.pop("sample_id"),
}


@pytest.mark.parametrize("message", list(SILENT_LOCOMO))
def test_locomo_input_once_accepted_silently_is_named(tmp_path, message):
    path = _locomo(tmp_path, SILENT_LOCOMO[message])
    with pytest.raises(BadRecordError, match=re.escape(f"LoCoMo file {path}, {message}")):
        read_locomo(path)


def test_a_repeated_locomo_sample_id_is_an_error(tmp_path):
    sample = json.loads((DATA / "locomo" / "locomo10_conv-26.json").read_text())
    sample = sample[0] if isinstance(sample, list) else sample
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample, sample]))
    with pytest.raises(BadRecordError, match=re.escape(f"LoCoMo file {path}, sample conv-26 (#1): field 'sample_id' "
                                                       "repeats sample #0's")):
        read_locomo(path)


# ---- memgym eval: settings refused before any model loads; the resume check reads the data's content ----
@pytest.mark.parametrize("flags, says", [(["--limit", "-1"], "--limit: expected an integer >= 1, got -1"),
                                         (["--batch-size", "0"], "--batch-size: expected an integer >= 1, got 0"),
                                         (["--rag-k", "0"], "--rag-k: expected an integer >= 1, got 0")])
def test_eval_refuses_out_of_range_settings_as_usage_errors(tmp_path, flags, says):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "memgym_env.cli", "eval", "--benchmark", "locomo", "--data",
                           str(DATA / "locomo" / "locomo10_conv-26.json"), "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr, done.stderr[-500:]
    assert not out.exists()  # refused before anything was written or loaded


def test_eval_config_refuses_out_of_range_settings_too():
    from memgym_env.benchmarks.runner import EvalConfig

    with pytest.raises(ValueError, match="--batch-size must be an integer >= 1, got 0"):
        EvalConfig(benchmark="locomo", data="d.json", out="o", batch_size=0)
    with pytest.raises(ValueError, match="--limit must be an integer >= 1, got -1"):
        EvalConfig(benchmark="locomo", data="d.json", out="o", limit=-1)


def test_the_resume_fingerprint_follows_the_data_content_not_its_path(tmp_path):
    from memgym_env.benchmarks.runner import EvalConfig, _check_resume

    data = tmp_path / "a.json"
    data.write_bytes((DATA / "locomo" / "locomo10_conv-26.json").read_bytes())
    out = tmp_path / "run"
    out.mkdir()
    cfg = EvalConfig(benchmark="locomo", data=str(data), out=str(out), system="oracle-evidence")
    assert cfg.fingerprint()["data"].startswith("sha256:")
    (out / "run.json").write_text(json.dumps({"config": cfg.fingerprint(), "invocations": []}))
    moved = tmp_path / "b.json"
    data.rename(moved)
    _check_resume(out, EvalConfig(benchmark="locomo", data=str(moved), out=str(out), system="oracle-evidence"))
    moved.write_bytes(moved.read_bytes().replace(b"Caroline", b"Carolina"))  # same path, other content
    with pytest.raises(ValueError, match="another configuration \\(data: 'sha256:"):
        _check_resume(out, EvalConfig(benchmark="locomo", data=str(moved), out=str(out), system="oracle-evidence"))


def test_a_run_folder_fingerprinted_by_path_still_resumes(tmp_path):
    from memgym_env.benchmarks.runner import EvalConfig, _check_resume

    data = tmp_path / "a.json"
    data.write_bytes((DATA / "locomo" / "locomo10_conv-26.json").read_bytes())
    out = tmp_path / "run"
    out.mkdir()
    cfg = EvalConfig(benchmark="locomo", data=str(data), out=str(out), system="oracle-evidence")
    old = {**cfg.fingerprint(), "data": str(data.resolve())}  # as run folders before content hashes hold it
    (out / "run.json").write_text(json.dumps({"config": old, "invocations": []}))
    run = _check_resume(out, cfg)
    assert run["config"]["data"] == cfg.fingerprint()["data"]  # rewritten as the hash when run.json is written
    other = tmp_path / "c.json"
    other.write_bytes(data.read_bytes())
    with pytest.raises(ValueError, match="another configuration"):  # a path-era folder knows only its own path
        _check_resume(out, EvalConfig(benchmark="locomo", data=str(other), out=str(out), system="oracle-evidence"))


# ---- JSON that other readers take from disk goes through the depth and size guard too ----
def test_a_deeply_nested_bank_file_is_one_error_naming_it(tmp_path):
    from membuilder.memory.persist import read_bank

    (tmp_path / "bank").mkdir()
    (tmp_path / "bank" / "bank.json").write_text(NESTED)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "bank" / "bank.json")) + ": JSON nested deeper"):
        read_bank(tmp_path / "bank")


def test_deeply_nested_interactive_results_are_one_error_naming_the_file(tmp_path):
    from memgym_env.interactive.results import load_results

    (tmp_path / "results.json").write_text(NESTED)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "results.json")) + ": JSON nested deeper"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "results.json")) + ": not valid JSON"):
        load_results(tmp_path)


# ---- memgym world validate: what it used to accept ----
WORLD_EXAMPLE = DATA / "amemgym" / "amemgym_format_example.json"

WORLD_FAULTS = {
    "period 1, field 'period_end': 2020-09-01 is before the period's start 2020-10-01 (time runs backwards)":
        lambda u: u["periods"][1].update(period_end="2020-09-01"),
    "period 2, field 'period_start': 2020-12-01 is before the previous period's end 2021-01-01 (periods overlap)":
        lambda u: u["periods"][2].update(period_start="2020-12-01"),
    "period 1, session 0, field 'session_time': 2020-09-12 10:00:00 is before the period start 2020-10-01":
        lambda u: u["periods"][1]["sessions"][0].update(session_time="2020-09-12 10:00:00"),
    "field 'user_profile.uuid': 'someone-else' is not the user's id": lambda u: u["user_profile"].update(uuid="someone-else"),
    "field 'qas': empty": lambda u: u.update(qas=[]),
}


@pytest.mark.parametrize("message", list(WORLD_FAULTS))
def test_world_validate_refuses_what_it_used_to_accept(tmp_path, message):
    from memgym_env.world.validate import world_issues

    assert world_issues(read_world(WORLD_EXAMPLE)) == []
    users = json.loads(WORLD_EXAMPLE.read_text())
    WORLD_FAULTS[message](users[0])
    path = tmp_path / "world.json"
    path.write_text(json.dumps(users))
    issues = world_issues(read_world(path))
    assert any(message in i for i in issues), issues
    done = subprocess.run([sys.executable, "-m", "memgym_env.cli", "world", "validate", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and message in done.stdout + done.stderr


def test_the_count_of_values_is_bounded_per_file_and_per_record():
    from memgym_env.benchmarks.bounds import Bounds, check_bounds

    # Counted: each opening bracket and each comma outside strings ("x,y,{[" counts nothing):
    # 8 in the file; 4 inside the first record after its own "{", none inside the second.
    text = b'[{"a": [1, 2, 3], "b": "x,y,{["}, {"c": 1}]'
    for chunk in (1, 4, 1 << 20):
        check_bounds(text, "x", Bounds(max_bytes=100, max_values=8), chunk=chunk)
        with pytest.raises(JSONLimitError, match="the file holds more than 7 values"):
            check_bounds(text, "x", Bounds(max_bytes=100, max_values=7), chunk=chunk)
        check_bounds(text, "x", Bounds(max_bytes=100, max_record=100, max_values=4), chunk=chunk)
        with pytest.raises(JSONLimitError, match="a record holds more than 3 values"):
            check_bounds(text, "x", Bounds(max_bytes=100, max_record=100, max_values=3), chunk=chunk)


def test_a_deeply_nested_run_record_or_item_line_is_one_error_naming_it(tmp_path):
    from memgym_env.benchmarks.runner import EvalConfig, _check_resume, read_items

    (tmp_path / "run.json").write_text(NESTED)
    cfg = EvalConfig(benchmark="locomo", data="d.json", out=str(tmp_path))
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "run.json")) + ": not a run record .*nested deeper"):
        _check_resume(tmp_path, cfg)
    (tmp_path / "items.jsonl").write_text(NESTED + "\n" + '{"id": "a"}\n')
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "items.jsonl")) + ", line 1: damaged .*nested deeper"):
        read_items(tmp_path / "items.jsonl")
