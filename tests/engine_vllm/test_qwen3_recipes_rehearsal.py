"""A dress rehearsal of the README's Qwen3-4B GPU commands on the CPU.

The commands are read out of README.md and train/README.md, not copied here, and run as written
but for command-line overrides: the model (a tiny random Qwen3 saved to a folder, the byte-level
tokenizer of ``membuilder.training.tiny``), step counts, lengths, users, output paths (all under one
tmp folder, the SFT policy feeding ADRPO as the README chains them), and what a CPU needs:

* ``--use_cpu true``: accelerate's single-GPU config runs on a CPU only with it (transformers stops
  at start with "doesn't support bf16/gpu" otherwise);
* ``--bf16 false --dtype float32``: bf16 does run on this CPU, but without native bf16 (AVX2) a step
  of the tiny model took 45 s against about 2 s in float32;
* the answerer ``openai:Qwen/Qwen3-32B@http://localhost:8001/v1`` points at a real ``memgym serve``
  on a free port, serving the tiny model under the name ``Qwen/Qwen3-32B`` (so the LLM answer and
  judge path runs over HTTP, ``chat_template_kwargs`` included);
* prompts of 1,024 tokens: the byte-level tokenizer makes a token of every byte, and the agents'
  instructions alone (never cut) are several hundred bytes; 256 would drop every SFT row.

ZeRO-3 needs DeepSpeed, which is not installed here, so the
README's ZeRO-3 SFT command runs with the single-GPU accelerate config, and ``zero3.yaml`` is checked
as far as accelerate gets without DeepSpeed. The whole module took 5 min 53 s on 2 shared cores
(load average 7-9): SFT 92 s, ADRPO 150 s, FSDP 44 s. ``fsdp.yaml`` (FSDP2) runs in two CPU processes over
gloo. Server mode cannot train on a CPU (TRL sends weights over NCCL): its start-up refusal, its
config's answerer client against the real server, and ``trl vllm-serve``'s flags are checked.

Every README GPU command must be owned by a test here (``RECIPES``): a command that changes, or a
new one, fails ``test_every_readme_gpu_command_is_rehearsed`` until a test takes it up.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
READMES = ("README.md", "train/README.md")
# one thread per process: on 2 cores shared with other work, two torch threads made the tiny
# model's forward and backward 6x slower than one
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "", "VLLM_CPU_KVCACHE_SPACE": "1"}
CPU = ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"]
SFT_SMALL = ["--max_steps", "2", "--max_length", "2048", "--max_prompt_tokens", "1024", "--users", "0",
             "--max_sessions_per_user", "2"]
# G = 2: one session is 4 agents x 2 rollouts = 2 rows x 4 accumulation steps, one update per rollout batch
ADRPO_SMALL = ["--max_steps", "2", "--max_prompt_tokens", "1024", "--max_completion_length", "24", "--users", "10",
               "--max_sessions_per_user", "2", "--num_generations", "2", "--per_device_train_batch_size", "2",
               "--gradient_accumulation_steps", "4", "--vllm_max_model_length", "1536"]


# ---- the README's GPU commands -------------------------------------------------------------------


def readme_gpu_commands() -> list[list[str]]:
    """Every ``accelerate launch --config_file configs/accelerate/...`` and ``trl vllm-serve`` command in
    the READMEs' code blocks, continuation lines joined, comments dropped, as argv (leading
    ``VAR=value`` assignments kept as words)."""
    commands = []
    for name in READMES:
        text = (ROOT / name).read_text(encoding="utf-8")
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
        blocks += re.findall(r"((?:\n {4}.*)+)", text)  # indented blocks
        for block in blocks:
            logical = re.sub(r"\\\n\s*", " ", block)
            for line in logical.splitlines():
                line = line.split(" #")[0].strip()
                if "accelerate launch --config_file configs/accelerate/" in line or "trl vllm-serve" in line:
                    commands.append(shlex.split(line))
    unique = []
    for c in commands:
        if c not in unique:
            unique.append(c)
    return unique


def readme_command(*words: str) -> list[str]:
    """The README's one GPU command that contains all ``words`` (adjacent pairs as written)."""
    found = [c for c in readme_gpu_commands() if all(w in c for w in words)]
    assert len(found) == 1, f"README GPU commands with {words}: {found}"
    return found[0]


def environment_and_argv(command: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while command and re.fullmatch(r"[A-Z_]+=\S*", command[0]):
        key, value = command[0].split("=", 1)
        env[key] = value
        command = command[1:]
    return env, command


def swap(command: list[str], flag: str, value: str) -> list[str]:
    i = command.index(flag)
    return [*command[:i + 1], value, *command[i + 2:]]


def launch(command: list[str], overrides: list[str], log: Path, timeout: int = 600) -> str:
    """Run a README ``accelerate launch`` command from the repository root with this venv's launcher and
    ``overrides`` appended to the script's arguments; the log's text, after a zero exit."""
    _, argv = environment_and_argv(command)
    assert argv[:2] == ["accelerate", "launch"], argv
    cmd = [str(BIN / "python"), "-m", "accelerate.commands.launch", *argv[2:], *overrides]
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
    text = log.read_text(encoding="utf-8", errors="replace")
    assert rc == 0, f"{shlex.join(cmd)} exited {rc}:\n{text[-4000:]}"
    return text


def logged_steps(text: str) -> list[dict]:
    """The trainer's per-step log lines (dicts with a loss) from a run's output."""
    steps = []
    for match in re.finditer(r"\{'loss': .*?\}", text):
        import ast

        steps.append({k: float(v) for k, v in ast.literal_eval(match.group(0)).items()})
    return steps


# ---- the fixtures: a tiny Qwen3 and a real OpenAI-compatible server --------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from membuilder.training.tiny import byte_tokenizer, tiny_qwen3

    tmp = tmp_path_factory.mktemp("qwen3_rehearsal")
    tok = byte_tokenizer()
    # hidden 256 gives head_dim 32, a head size vLLM's CPU attention has kernels for
    tiny_qwen3(tok, layers=2).save_pretrained(tmp / "tiny")
    tok.save_pretrained(tmp / "tiny")
    return tmp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def answerer(work):
    """``memgym serve`` on a free port serving the tiny model as ``Qwen/Qwen3-32B``; the answerer spec."""
    import urllib.request

    port = _free_port()
    log = (work / "serve.log").open("w")
    proc = subprocess.Popen([str(BIN / "memgym"), "serve", "--model", str(work / "tiny"), "--served-name",
                             "Qwen/Qwen3-32B", "--no-embedder", "--port", str(port), "--threads", "1",
                             "--max-tokens", "16"], cwd=ROOT, env=ENV, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"memgym serve did not start:\n{(work / 'serve.log').read_text()}") from None
                time.sleep(1)
        yield f"openai:Qwen/Qwen3-32B@{url}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def env_overrides(config: str, answerer_spec: str) -> str:
    """The config's own env_overrides with only the answerer's URL changed (on the command line the JSON
    replaces the file's whole mapping)."""
    import yaml

    mapping = yaml.safe_load((ROOT / config).read_text(encoding="utf-8"))["env_overrides"]
    assert mapping["answerer"].startswith("openai:Qwen/Qwen3-32B@"), mapping["answerer"]
    return json.dumps({**mapping, "answerer": answerer_spec})


# ---- the rehearsal -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sft_policy(work):
    """The README's SFT command (ZeRO-3 swapped for the single-GPU config: no DeepSpeed here)."""
    command = readme_command("train/sft.py", "configs/train/sft_qwen3_4b.yaml")
    assert command[command.index("--config_file") + 1] == "configs/accelerate/zero3.yaml"
    command = swap(command, "--config_file", "configs/accelerate/single_gpu.yaml")
    out = work / "runs" / "sft_qwen3_4b"
    text = launch(command, ["--model_name_or_path", str(work / "tiny"), "--output_dir", str(out),
                            "--save_policy_to", str(out / "policy"), *SFT_SMALL, *CPU], work / "sft.log")
    assert "SFT rows: 8 of 2 sessions x 4 agents" in text
    assert (out / "policy" / "merged" / "config.json").is_file(), text[-3000:]
    return out / "policy" / "merged", text


def test_the_readme_sft_command_trains_two_steps_and_writes_the_merged_policy(sft_policy):
    merged, text = sft_policy
    summary = re.search(r"\{'train_runtime'.*?\}", text)
    assert summary, text[-3000:]
    assert "'epoch'" in summary.group(0)
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(merged).model_type == "qwen3"


def test_the_readme_adrpo_colocate_command_trains_on_the_sft_policy_with_a_served_answerer(work, sft_policy, answerer):
    """Two ADRPO updates with vLLM's CPU engine colocated, started from the SFT run's merged policy, the
    LLM answer and judge calls going to a real HTTP server."""
    merged, _ = sft_policy
    config = "configs/train/adrpo_qwen3_4b_colocate.yaml"
    command = readme_command("train/adrpo.py", config)
    assert command[command.index("--config_file") + 1] == "configs/accelerate/single_gpu.yaml"
    import yaml

    # the published chain: the ADRPO config reads what the SFT config writes
    assert yaml.safe_load((ROOT / config).read_text())["model_name_or_path"] == \
        yaml.safe_load((ROOT / "configs/train/sft_qwen3_4b.yaml").read_text())["save_policy_to"] + "/merged"
    out = work / "runs" / "adrpo_qwen3_4b_colocate"
    text = launch(command, ["--model_name_or_path", str(merged), "--output_dir", str(out),
                            "--save_policy_to", str(out / "policy"), "--env_overrides", env_overrides(config, answerer),
                            *ADRPO_SMALL, *CPU], work / "adrpo_colocate.log")
    steps = [s for s in logged_steps(text) if "reward/task" in s]
    assert len(steps) == 2, text[-4000:]
    assert all(s["completions/mean_length"] > 0 and "adrpo/weight_core" in s and s["time/generate"] > 0
               for s in steps)
    assert all(s["reward/task_rewarded"] == 1 for s in steps)  # reward_density 1: every session asked questions
    # answers came back over HTTP cut at the server's 16-token limit (the config allows 48): the served
    # model answered, not a local one
    assert all(s["reward/answers_cut"] > 0 for s in steps), steps
    assert (out / "policy" / "merged" / "config.json").is_file()
    # the colocated engine is stopped before the process group goes (train/common.py), not at exit
    assert "Invalid process group" not in text and "Traceback" not in text, text[-4000:]


def test_fsdp_config_runs_the_sft_command_in_two_cpu_processes(work):
    """configs/accelerate/fsdp.yaml (FSDP2) starts two CPU processes that talk over gloo and train."""
    command = readme_command("train/sft.py", "configs/train/sft_qwen3_4b.yaml")
    command = swap(command, "--config_file", "configs/accelerate/fsdp.yaml")
    i = command.index("train/sft.py")
    command = [*command[:i], "--num_processes", "2", "--main_process_port", str(_free_port()), *command[i:]]
    out = work / "runs" / "sft_fsdp"
    # one update of one row per process: two FSDP2 steps of 4 rows took over 4 minutes on 2 loaded cores
    text = launch(command, ["--model_name_or_path", str(work / "tiny"), "--output_dir", str(out), *SFT_SMALL, *CPU,
                            "--max_steps", "1", "--gradient_accumulation_steps", "1"], work / "sft_fsdp.log")
    assert text.count("SFT rows: 8 of 2 sessions x 4 agents") == 2  # both processes built their rows
    assert re.search(r"\{'train_runtime'.*?\}", text), text[-3000:]


def test_zero3_config_is_read_by_accelerate_and_stops_only_for_the_missing_deepspeed():
    """ZeRO-3 needs DeepSpeed: where it is missing, accelerate reads zero3.yaml, picks its DeepSpeed
    launcher and stops there, naming DeepSpeed; with DeepSpeed installed this is a GPU recipe."""
    import importlib.util

    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "configs/accelerate/zero3.yaml"))
    assert config.distributed_type == "DEEPSPEED" and config.deepspeed_config["zero_stage"] == 3
    fsdp = load_config_from_file(str(ROOT / "configs/accelerate/fsdp.yaml"))
    assert fsdp.distributed_type == "FSDP" and fsdp.fsdp_config["fsdp_version"] == 2
    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("DeepSpeed is installed: ZeRO-3 is a GPU recipe, beyond this CPU rehearsal")
    _, argv = environment_and_argv(readme_command("configs/accelerate/zero3.yaml", "train/adrpo.py"))
    run = subprocess.run([str(BIN / "python"), "-m", "accelerate.commands.launch", *argv[2:]], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "DeepSpeed is not installed" in run.stderr, run.stderr[-3000:]
    assert "deepspeed_launcher" in run.stderr  # accelerate chose ZeRO's launcher from the config and --num_processes


def test_server_mode_command_stops_at_start_on_a_cpu_naming_nccl():
    """The README's server-mode training command, its launcher swapped (no DeepSpeed), stops before any
    model loads and says why."""
    command = readme_command("configs/accelerate/zero3.yaml", "train/adrpo.py")
    env, argv = environment_and_argv(command)
    assert env == {"CUDA_VISIBLE_DEVICES": "2,3,4,5,6,7"}
    single = swap(command, "--config_file", "configs/accelerate/single_gpu.yaml")
    single = [w for w in single if w not in ("--num_processes", "6")]
    _, single = environment_and_argv(single)
    run = subprocess.run([str(BIN / "python"), "-m", "accelerate.commands.launch", *single[2:], *CPU], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "vllm_mode: server, which a CPU cannot run" in run.stdout + run.stderr
    assert "NCCL" in run.stdout + run.stderr


def test_server_mode_configs_answerer_and_vllm_client_settings_against_a_real_server(answerer):
    """The server config's own reward path on the CPU: its scorer, with the answerer pointed at the real
    server, scores one session's oracle outputs over HTTP; its vLLM client settings parse."""
    from trl import ModelConfig, TrlParser

    from membuilder.training.adrpo import ADRPOConfig
    from train.adrpo import ADRPOScriptArgs, make_scorer

    config = "configs/train/adrpo_qwen3_4b_server.yaml"
    script, args, _ = TrlParser((ADRPOScriptArgs, ADRPOConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(ROOT / config), "--env_overrides", env_overrides(config, answerer), "--users", "10",
         "--max_sessions_per_user", "1", "--output_dir", "/tmp/unused", *CPU])
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_host, args.vllm_server_port) == (True, "server",
                                                                                             "127.0.0.1", 8000)
    assert script.construction_config().answer_mode == "llm"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        scorer = make_scorer(script, [10])
        (key,) = scorer.session_keys()
        from train.common import expert_records

        (record,) = expert_records(script.construction_config(), [10], 1)
        assert record["key"] == key
        (result,) = scorer.score(key, [record["outputs"]])
    finally:
        os.chdir(cwd)
    # the questions went to the served model: its answers stop at the server's 16-token limit (the config
    # allows 48), which the scorer counts
    assert result.info["answers_cut"] > 0, result.info


def test_trl_vllm_serve_accepts_the_readme_flags():
    command = readme_command("trl", "vllm-serve")
    env, argv = environment_and_argv(command)
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    helptext = subprocess.run([str(BIN / "trl"), "vllm-serve", "--help"], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=300).stdout
    flags = [w for w in argv if w.startswith("--")]
    assert flags == ["--model", "--tensor-parallel-size"]
    for flag in flags:
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", helptext), f"trl vllm-serve --help lacks {flag}"
    # the served model is the SFT policy the training configs read
    assert argv[argv.index("--model") + 1] == "runs/sft_qwen3_4b/policy/merged"


# ---- no drift between the READMEs and this rehearsal ----------------------------------------------------

RECIPES = {
    "accelerate launch --config_file configs/accelerate/zero3.yaml train/sft.py --config configs/train/sft_qwen3_4b.yaml":
        ["test_the_readme_sft_command_trains_two_steps_and_writes_the_merged_policy",
         "test_fsdp_config_runs_the_sft_command_in_two_cpu_processes",
         "test_zero3_config_is_read_by_accelerate_and_stops_only_for_the_missing_deepspeed"],
    "accelerate launch --config_file configs/accelerate/single_gpu.yaml train/adrpo.py "
    "--config configs/train/adrpo_qwen3_4b_colocate.yaml":
        ["test_the_readme_adrpo_colocate_command_trains_on_the_sft_policy_with_a_served_answerer"],
    "CUDA_VISIBLE_DEVICES=0,1 trl vllm-serve --model runs/sft_qwen3_4b/policy/merged --tensor-parallel-size 2":
        ["test_trl_vllm_serve_accepts_the_readme_flags"],
    "CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 accelerate launch --config_file configs/accelerate/zero3.yaml "
    "--num_processes 6 train/adrpo.py --config configs/train/adrpo_qwen3_4b_server.yaml":
        ["test_zero3_config_is_read_by_accelerate_and_stops_only_for_the_missing_deepspeed",
         "test_server_mode_command_stops_at_start_on_a_cpu_naming_nccl",
         "test_server_mode_configs_answerer_and_vllm_client_settings_against_a_real_server"],
}


def test_every_readme_gpu_command_is_rehearsed():
    """Each GPU command in the READMEs, word for word, is owned by tests here that take it from the README
    (a changed flag or a new command fails until a test takes it up), and every flag in them is covered."""
    found = {shlex.join(c) for c in readme_gpu_commands()}
    assert found == set(RECIPES), {"in the READMEs, not rehearsed": sorted(found - set(RECIPES)),
                                   "rehearsed, gone from the READMEs": sorted(set(RECIPES) - found)}
    for owners in RECIPES.values():
        for name in owners:
            assert callable(globals().get(name)), name
    flags = {w for c in readme_gpu_commands() for w in c if w.startswith("--")}
    assert flags == {"--config_file", "--config", "--model", "--tensor-parallel-size", "--num_processes"}, flags


def test_readme_parser_reads_both_block_styles():
    """The parser joins continuation lines in README.md's fenced block and train/README.md's indented one."""
    commands = readme_gpu_commands()
    colocate = [c for c in commands if "configs/train/adrpo_qwen3_4b_colocate.yaml" in c]
    assert len(colocate) == 1  # the same command in both READMEs, counted once
    assert colocate[0][-2:] == ["--config", "configs/train/adrpo_qwen3_4b_colocate.yaml"]

