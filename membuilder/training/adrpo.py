"""ADRPO: GRPO whose advantage for each memory agent is scaled by its memory type's contribution.

One RL sample is one session (MemBuilder, protocols §2-§3). The dataset holds four rows per
session, one per agent (``prompts.rl_rows``); TRL draws G completions per row. Then:

1. ``SessionRepeatSampler`` shuffles sessions, not rows, so a session's four agent prompts
   always land in the same generation batch (and on the same process).
2. ``SessionReward`` (``membuilder.training.trl_reward``, the reward a plain ``GRPOTrainer`` uses
   too) pairs the k-th completion of each of the four agents into rollout k,
   flips the reward-density coin, and has a ``CandidateScorer`` score the G rollouts together
   (one shared snapshot; ``task_rewarded=`` the coin). Each completion gets its own agent's
   reward r_a and attribution weight w exactly as the scorer returns them (``membuilder.reward``
   is the one definition of both; alpha and lambda are the scorer's settings).
3. TRL normalises rewards within each agent prompt's group of G (``scale_rewards="group"``).
4. ``ADRPOTrainer._compute_loss`` multiplies those advantages by w before TRL's clipped loss,
   so the weight scales both PPO terms. With alpha = 1 every w is 1 and the loss is GRPO's.

Several processes (``accelerate launch --num_processes N``): the sampler is the same in every
process and the dataloader hands each process consecutive slices of ``per_device_train_batch_size
x steps_per_generation`` rows of a generation batch, so a multiple of 4 agents x G keeps every
session whole within one process. Each process generates and scores its own sessions, TRL gathers
the rewards, normalises them per group and keeps its own slice of the advantages: the weights are
computed locally, in the same row order, and line up with that slice. ``rollout_log`` writes what
each process scored, row by row, to check this on a real run.

The trainer never imports the environment: the scorer arrives as an argument.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler, split_tensor_dict

from membuilder.memory.ops import AGENTS
from membuilder.plumbing.json_files import atomic_write_text
from membuilder.reward import CandidateScorer
from membuilder.training.importance_ratio import RatioStats, importance_ratio
from membuilder.training.merged_weights import install_exact_lora_sync
from membuilder.training.shared_prefix import checkpointing, shared_prefix_logps, through_wrapper
from membuilder.training.trl_reward import CREDITS, SessionReward, tied
from membuilder.training.vllm_cpu_sync import engine_dtype_for_cpu, install_cpu_weight_sync

# ---- the ADRPO idea, in a few lines -----------------------------------------------------------


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage within each agent prompt's group of G samples (what TRL computes).

        A_i = (r_i - mean_G(r)) / (std_G(r) + eps)     (std with Bessel's correction, as TRL)
    """
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + eps)).view(-1)


def weight_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """ADRPO: A'_i = w_m(i) * A_i, with w = alpha for the dominant memory type's agent, else 1.

    The weight multiplies the advantage, so it scales both terms of the clipped objective:
        J = E[ sum_m 1/|a_m| sum_k min(w_m rho A, w_m clip(rho, 1-eps, 1+eps) A) ] - beta KL
    Works for advantages of shape (B,) or (B, T).
    """
    weights = weights.to(advantages.dtype)
    return advantages * (weights if advantages.dim() == 1 else weights.unsqueeze(1))


def zero_tied(advantages: torch.Tensor, rewards: Sequence[float], group_size: int) -> torch.Tensor:
    """``advantages`` with each group of ``group_size`` rows whose rewards tie (``trl_reward.tied``) set to
    exactly 0: the mean of eight equal float32 rewards can miss them by an ulp, which the division by
    std + 1e-4 turns into advantages of up to 3e-4 of either sign, pushing the policy on nothing."""
    if len(rewards) != len(advantages):
        raise RuntimeError(f"{len(rewards)} rewards for {len(advantages)} advantages")
    out = advantages.clone()
    for i, is_tied in enumerate(group_ties(rewards, group_size)):
        if is_tied:
            out[i * group_size:(i + 1) * group_size] = 0
    return out


def group_ties(rewards: Sequence[float], group_size: int) -> list[bool]:
    """For each consecutive group of ``group_size`` rewards (one agent prompt's G rollouts), whether it ties."""
    return [tied(rewards[i:i + group_size]) for i in range(0, len(rewards), group_size)]


def loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """The completion tokens TRL's loss counts: the completion mask, times the tool mask where there is one."""
    return inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]


# The loss types whose per-token loss is the advantage times a factor: zero advantages give a zero gradient.
LINEAR_IN_ADVANTAGE = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")


# ---- configuration ------------------------------------------------------------------------------


@dataclass
class ADRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the ADRPO options. Every GRPO option (beta, num_generations,
    temperature, top_p, use_vllm, vllm_mode, ...) keeps its TRL meaning. The reward's settings
    (alpha, lambda, reward density) belong to the scorer, i.e. the env config, and are not
    restated here."""

    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "Longest prompt; longer ones lose memory-view entries first, never instructions."})
    share_prompt: bool = field(default=True, metadata={
        "help": "Run each distinct prompt once in the loss and put its G completions on its cache "
                "(membuilder.training.shared_prefix); not under gradient checkpointing, whose layers drop the cache, "
                "where TRL's own pass runs. Micro-batches keep the sampler's order, so "
                "per_device_train_batch_size = G with gradient_accumulation_steps = 4 holds one agent prompt each "
                "(the least memory); 4 x G with 1 holds a whole session."})
    share_prompt_rows: int | None = field(default=None, metadata={
        "help": "With share_prompt: a prompt's completions go through the model this many at a time, shortest first, "
                "each pass padded to its own longest instead of the group's (bench/shared_prompt_loss.py); "
                "null runs the whole group at once."})
    # TRL leaves dropout on. In RL it is noise twice over: the importance ratios compare log-probs of two
    # forwards of one policy (and of the generator's, which has no dropout), and LoRA's dropout masks cost more
    # than the adapted matmuls on a CPU (half of every forward of the CPU ladder's RL steps).
    disable_dropout: bool = field(default=True, metadata={
        "help": "Set every dropout probability of the policy to 0 (LoRA's included), so the log-probs of the rollout "
                "and of the loss agree and the forwards skip the masks. false keeps the model's dropout."})
    # With one update per generation batch and no dropout, the weights that sampled (as the trainer holds them)
    # are the weights the loss differentiates: TRL's extra no-grad pass for the vLLM importance ratio recomputes
    # the loss pass's own log-probs (18% of a CPU ladder step after the dropout fix).
    is_ratio_from_loss: bool = field(default=True, metadata={
        "help": "With vLLM's importance-sampling correction, take the policy's log-probs for the ratio from the loss "
                "pass instead of a separate forward after generation (same numbers when num_iterations = 1, "
                "gradient_accumulation_steps is a multiple of steps_per_generation and dropout is off; otherwise "
                "TRL's pass runs). false always runs TRL's pass."})
    sessions_per_step: int | None = field(default=None, metadata={
        "help": "Sessions in each optimizer step (each with 4 agents x num_generations completions): sets "
                "gradient_accumulation_steps so that per_device_train_batch_size x gradient_accumulation_steps x "
                "processes = sessions_per_step x 4 x G. MemBuilder's published recipe: 8 sessions x 4 agents x 8 "
                "samples. None: gradient_accumulation_steps as given."})
    redraw_tied: int = field(default=0, metadata={
        "help": "When a rollout batch holds agent groups whose G rewards all tie (no gradient), draw the whole batch "
                "again, up to this many times, and keep the draw with the fewest tied groups (the earliest on a tie). "
                "Logged: reward/redraws, reward/tied_groups_first_draw (reward/tied_groups is the kept draw's). All "
                "processes redraw together when any has a tie. 0: every draw is kept, as published."})
    credit: str = field(default="joint", metadata={
        "help": "How a session's completions are scored: joint (MemBuilder's joint rollout: rollout k is every agent's "
                "k-th completion, so an agent's reward also carries the other three's samples) or per_agent (each "
                "agent's G completions written beside the expert's outputs for the other three, so its rewards differ "
                "by its own output alone; 4 scorings a session instead of 1)."})
    skip_tied: bool = field(default=True, metadata={
        "help": "A group whose G rewards tie gets advantage exactly 0 (TRL's mean-centring leaves float noise, up to "
                "3e-4 on the CPU ladder once divided by std + 1e-4), and the loss skips the forward and backward of a "
                "micro-batch in which every completion has advantage 0 or is left out of the loss: with beta 0, no "
                "entropy bonus and one process it adds exactly 0 to the gradient. TRL's entropy and clip-ratio "
                "metrics then cover the micro-batches that trained; logged: loss/skipped_batches. false: TRL's "
                "advantages and a pass over every micro-batch."})
    rollout_log: str | None = field(default=None, metadata={
        "help": "Append every scored completion (step, session_key, agent, k, completion, reward, weight, advantage) "
                "as JSON lines to <rollout_log>.<process_index>.jsonl, one file per process. A run resumed from a "
                "checkpoint first drops the lines of the steps it redoes (a fresh run: all of them)."})


    def __post_init__(self) -> None:
        if isinstance(self.redraw_tied, bool) or not isinstance(self.redraw_tied, int) or self.redraw_tied < 0:
            raise ValueError(f"redraw_tied must be a whole number >= 0; got {self.redraw_tied!r}")
        if self.credit not in CREDITS:
            raise ValueError(f"credit {self.credit!r}; expected one of {CREDITS}")
        if self.sessions_per_step is not None:
            self.gradient_accumulation_steps = accumulation_for(
                self.sessions_per_step, self.num_generations, self.per_device_train_batch_size,
                int(os.environ.get("WORLD_SIZE", "1")))
        super().__post_init__()
        if self.use_vllm and self.vllm_importance_sampling_correction and (
                self.top_p < 1.0 or (self.top_k or 0) > 0):
            warnings.warn(TOP_P_RATIO_WARNING.format(top_p=self.top_p, top_k=self.top_k), stacklevel=2)


# vLLM hands TRL each sampled token's log-prob after top-p / top-k renormalisation; the trainer's log-prob of the
# same token is over the whole vocabulary. Their ratio is then the probability mass the filter kept, below 1 at
# every filtered position, and multiplied over a completion: the correction meant for engine noise shrinks each
# completion by how much the filter cut, most for the long and uncertain ones.
TOP_P_RATIO_WARNING = (
    "top_p={top_p}, top_k={top_k} with vllm_importance_sampling_correction: vLLM's log-probs are after the filter, the "
    "trainer's are not, so every completion's importance ratio shrinks by the probability mass the filter cut (at "
    "top_p 0.9 the CPU ladder's ratios averaged about 0.5). Set vllm_importance_sampling_correction: false, as "
    "MemBuilder's published verl recipe runs (no rollout correction), or top_p: 1.0 and top_k: 0.")


def generated_rows(output: dict[str, Any], pad_token_id: int | None) -> tuple[list[torch.Tensor], list[bool]]:
    """Each completion's generated token ids, and whether the loss leaves it out. TRL's
    mask_truncated_completions zeroes a cut completion's whole mask (a finished one keeps at least its EOS), so
    such a row is read from its ids, told apart from padding."""
    rows, out = [], []
    for row, m in zip(output["completion_ids"], output["completion_mask"].bool(), strict=True):
        masked = not bool(m.any())
        rows.append(row[row != pad_token_id] if masked else row[m])
        out.append(masked)
    return rows, out


def accumulation_for(sessions: int, generations: int, micro_batch: int, processes: int = 1) -> int:
    """gradient_accumulation_steps that make one optimizer step hold ``sessions`` whole sessions."""
    if not isinstance(sessions, int) or sessions < 1:
        raise ValueError(f"sessions_per_step must be an integer >= 1; got {sessions!r}")
    completions = sessions * len(AGENTS) * generations
    if completions % processes or (completions // processes) % micro_batch:
        raise ValueError(f"sessions_per_step {sessions} x {len(AGENTS)} agents x G={generations} = {completions} "
                         f"completions do not split into {processes} process(es) x per_device_train_batch_size "
                         f"{micro_batch} micro-batches; pick a micro-batch that divides {completions // processes}")
    return completions // processes // micro_batch


# ---- the sampler --------------------------------------------------------------------------------


class SessionRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` over sessions: whole sessions (their four adjacent rows) are shuffled.

    Each row is still repeated G times in a row, and each chunk of ``batch_size`` rows (a
    generation batch) is repeated ``repeat_count`` times, exactly as TRL expects.
    """

    def __init__(self, session_keys: Sequence[str], mini_repeat_count: int, batch_size: int = 1,
                 repeat_count: int = 1, shuffle: bool = True, seed: int | None = None):
        super().__init__(list(range(len(session_keys))), mini_repeat_count, batch_size, repeat_count, shuffle, seed)
        self.sessions: list[list[int]] = []
        for i, key in enumerate(session_keys):
            if self.sessions and session_keys[self.sessions[-1][0]] == key:
                self.sessions[-1].append(i)
            else:
                self.sessions.append([i])
        sizes = {len(s) for s in self.sessions}
        if len(sizes) != 1:
            raise ValueError(f"every session needs the same number of adjacent rows; got sizes {sorted(sizes)} "
                             "(are the rows of a session adjacent?)")
        rows = sizes.pop()
        if batch_size % rows:
            raise ValueError(f"a generation batch of {batch_size} prompts would split a session of {rows} agent rows; "
                             f"make generation_batch_size / num_generations a multiple of {rows}")

    def set_epoch(self, epoch: int) -> None:
        """Each epoch's session order follows from (seed, epoch) alone, not from how many epochs this
        sampler has already run: a run resumed from a checkpoint in a later epoch (a new sampler, which
        the trainer sets to that epoch) draws the sessions an uninterrupted run draws."""
        if self.shuffle and self.seed is not None:  # an unshuffled (evaluation) sampler has no generator
            self.generator.manual_seed(self.seed + epoch)

    def __iter__(self):
        order = (torch.randperm(len(self.sessions), generator=self.generator).tolist() if self.shuffle
                 else list(range(len(self.sessions))))
        rows = [i for s in order for i in self.sessions[s]]
        chunks = [rows[i:i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        for chunk in chunks:
            if len(chunk) < self.batch_size:
                continue  # an incomplete last batch is dropped, as in TRL
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index


# ---- the trainer ----------------------------------------------------------------------------------


def _start_step(resume_from_checkpoint, output_dir: str) -> int:
    """The optimizer step a run starts from: its checkpoint's (``True``: the last in ``output_dir``), else 0."""
    from transformers.trainer_utils import get_last_checkpoint

    checkpoint = (get_last_checkpoint(output_dir) if resume_from_checkpoint is True else resume_from_checkpoint)
    if not checkpoint:
        return 0
    return int(json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])


def trim_rollout_log(path: str, start: int) -> int:
    """Keep the lines a run resumed from the checkpoint of step ``start`` (0: started afresh) will not redo,
    and return how many were dropped: the stopped sitting's later steps would otherwise be logged twice."""
    log = Path(path)
    if not log.exists():
        return 0
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            step, mode = record["step"], record["mode"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            if number == len(lines):  # the last line of a run stopped while writing it
                continue
            raise ValueError(f"{path}: line {number} is not a rollout record with 'step' and 'mode' ({err})") from err
        # a train rollout logged at step s makes update s + 1; an evaluation at s runs before the checkpoint of s
        if step < start or (mode == "eval" and step == start):
            kept.append(line if line.endswith("\n") else line + "\n")
    if len(kept) == len(lines):
        return 0
    atomic_write_text(log, "".join(kept))  # a stop while trimming leaves the old log, never half of it
    return len(lines) - len(kept)


class ADRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with session-grouped sampling and attribution-weighted advantages.

    ``scorer`` scores a session's G candidate actions (see ``membuilder.reward``).
    The ``train_dataset`` comes from ``prompts.rl_rows``. Extra reward functions may be given
    through ``reward_funcs``; they are summed with the session reward as in TRL.
    """

    def __init__(self, model, args: ADRPOConfig, scorer: CandidateScorer, train_dataset, reward_funcs=None,
                 **kwargs):
        # the sampler keeps sessions whole, and the trainer logs the reward's metrics beside its own
        self.session_reward = SessionReward(scorer, seed=args.seed, whole_sessions=True, log_metrics=False,
                                            credit=args.credit)
        funcs = [self.session_reward] + list(reward_funcs or [])
        if args.scale_rewards != "group":
            raise ValueError("ADRPO normalises advantages within each agent prompt's group: keep scale_rewards='group'")
        with engine_dtype_for_cpu(args.use_vllm):
            super().__init__(model=model, reward_funcs=funcs, args=args, train_dataset=train_dataset, **kwargs)
        self._rollout_batches = 0
        self.ratio_in_loss = bool(
            args.is_ratio_from_loss and self.use_vllm and self.vllm_importance_sampling_correction
            and self.num_iterations == 1 and args.gradient_accumulation_steps % args.steps_per_generation == 0
            and args.disable_dropout)
        self._ratio_inputs: dict[str, Any] | None = None
        self._ratio_stats = {"train": RatioStats(), "eval": RatioStats()}
        if args.use_vllm:
            install_exact_lora_sync(self.vllm_generation)  # every sync, CPU or CUDA, reads the weights through it
            install_cpu_weight_sync(self)
        local = args.per_device_train_batch_size * args.steps_per_generation
        if local % (len(AGENTS) * self.num_generations):
            processes = self.accelerator.num_processes
            raise ValueError(
                f"per_device_train_batch_size x steps_per_generation = {local} completions per process must hold whole "
                f"sessions: a multiple of {len(AGENTS)} agents x G={self.num_generations}"
                + (f" (with {processes} processes, each process scores its own sessions, so a smaller share "
                   "would split a session across processes)" if processes > 1 else ""))

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if self.args.rollout_log:
            start = _start_step(resume_from_checkpoint, self.args.output_dir)
            dropped = trim_rollout_log(f"{self.args.rollout_log}.{self.accelerator.process_index}.jsonl", start)
            if dropped:
                print(f"rollout log: dropped {dropped} lines of steps {start} and later, which this run redoes")
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _get_train_sampler(self, dataset=None):
        dataset = self.train_dataset if dataset is None else dataset
        return SessionRepeatSampler(dataset["session_key"], mini_repeat_count=self.num_generations,
                                    batch_size=self.args.generation_batch_size // self.num_generations,
                                    repeat_count=self.num_iterations * self.args.steps_per_generation,
                                    shuffle=self.shuffle_dataset, seed=self.args.seed)

    def _get_eval_sampler(self, eval_dataset):
        # Evaluation scores sessions as training does: a session's four agent rows, G times each,
        # in one batch; in order, so two evaluations of one policy see the same batches.
        per_process = self.args.per_device_eval_batch_size
        if per_process % (len(AGENTS) * self.num_generations_eval):
            raise ValueError(f"per_device_eval_batch_size = {per_process} must hold whole sessions: a multiple of "
                             f"{len(AGENTS)} agents x G={self.num_generations_eval}")
        return SessionRepeatSampler(eval_dataset["session_key"], mini_repeat_count=self.num_generations_eval,
                                    batch_size=len(AGENTS), shuffle=False, seed=self.args.seed)

    def _draw(self, inputs):
        """One rollout batch from TRL: generation, rewards, advantages."""
        if not self.ratio_in_loss:
            return super()._generate_and_score_completions(inputs)
        # TRL then skips its no-grad log-prob pass and the ratio; _compute_loss supplies the ratio
        self.vllm_importance_sampling_correction = False
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self.vllm_importance_sampling_correction = True

    def _tied_groups(self, g: int) -> tuple[int, int]:
        """(tied, all) agent groups of the last draw: groups whose G rewards are equal give no gradient."""
        ties = group_ties(self.session_reward.last_rewards, g)
        return sum(ties), len(ties)

    def _any_process(self, count: int) -> int:
        if self.accelerator.num_processes == 1:
            return count
        local = torch.tensor([float(count)], device=self.accelerator.device)
        return int(self.accelerator.gather(local).sum().item())

    def _draw_until_untied(self, inputs, g: int) -> tuple[Any, dict[str, float | int]]:
        """The first draw, or with ``redraw_tied`` the draw with the fewest tied groups among up to
        1 + redraw_tied. Each draw re-runs the whole batch (its sessions stay whole); the session
        reward's record is put back to the kept draw's, so weights and metrics follow its rows."""
        output = self._draw(inputs)
        tied, total = self._tied_groups(g)
        info: dict[str, float | int] = {"redraws": 0, "first_tied": tied, "groups": total}
        if not self.model.training or not self.args.redraw_tied:
            return output, info
        record = ("last_weights", "last_rewards", "last_rewarded", "last_stats", "last_stat_totals")
        best = (tied, output, {k: getattr(self.session_reward, k) for k in record})
        while info["redraws"] < self.args.redraw_tied and self._any_process(best[0]) > 0:
            info["redraws"] += 1
            again = self._draw(inputs)
            tied, _ = self._tied_groups(g)
            if tied < best[0]:
                best = (tied, again, {k: getattr(self.session_reward, k) for k in record})
        for k, v in best[2].items():
            setattr(self.session_reward, k, v)
        return best[1], info

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        started = time.perf_counter()
        g = self.num_generations if mode == "train" else self.num_generations_eval
        output, draws = self._draw_until_untied(inputs, g)
        elapsed = time.perf_counter() - started
        # The weights are this process's, in its row order; TRL has already cut the gathered
        # advantages down to this process's slice (the same rows), so the two line up.
        weights = self.session_reward.last_weights
        if len(weights) != len(output["advantages"]):
            raise RuntimeError(f"{len(weights)} ADRPO weights for {len(output['advantages'])} completions "
                               f"in process {self.accelerator.process_index}")
        output["adrpo_weights"] = torch.tensor(weights, dtype=torch.float32, device=output["advantages"].device)
        if self.args.skip_tied and len(self.reward_funcs) == 1:  # extra reward functions add to what ties
            output["advantages"] = zero_tied(output["advantages"], self.session_reward.last_rewards, g)
        if self.args.rollout_log:
            self._log_rollouts(mode, inputs, output)
        self._rollout_batches += 1
        totals = dict(self.session_reward.last_stat_totals)
        # TRL's frac_reward_zero_std misses groups of equal rewards other than 0 and 1 (the float32 std of eight
        # 0.4s is 3e-8, not zero): count groups with no spread exactly, on the rewards as the scorer gave them
        rewards = self.session_reward.last_rewards
        groups = [rewards[i:i + g] for i in range(0, len(rewards), g)]
        totals["reward/frac_groups_alike"] = (float(sum(max(x) == min(x) for x in groups)), len(groups))
        if self.args.redraw_tied and mode == "train":
            totals["reward/redraws"] = (float(draws["redraws"]), 1)
            totals["reward/tied_groups_first_draw"] = (float(draws["first_tied"]), max(1, int(draws["groups"])))
        rows, _ = generated_rows(output, self.processing_class.pad_token_id)
        tokens = float(sum(len(r) for r in rows))  # cut completions left out of the loss included
        generate = max(0.0, elapsed - totals.get("time/score", (0.0, 1))[0])
        totals["time/generate"] = (generate, 1)
        totals["time/tokens_per_s"] = (tokens / max(generate, 1e-9), 1)
        for name, value in self._across_processes(totals).items():
            self._metrics[mode][name].append(value)
        return output

    def _across_processes(self, totals: dict[str, tuple[float, int]]) -> dict[str, float]:
        """Each statistic averaged over the rows of every process (each process scores its own sessions)."""
        if self.accelerator.num_processes == 1:
            return {name: total / count for name, (total, count) in totals.items()}
        from accelerate.utils import gather_object

        names = sorted(set(gather_object(list(totals))))  # one order in every process
        local = torch.tensor([list(totals.get(name, (0.0, 0))) for name in names], dtype=torch.float64,
                             device=self.accelerator.device)
        summed = self.accelerator.gather(local.unsqueeze(0)).sum(dim=0).tolist()
        return {name: total / count for name, (total, count) in zip(names, summed, strict=True) if count}

    def _log_rollouts(self, mode: str, inputs, output) -> None:
        """One JSON line per completion of this process's batch: what was generated (decoded from the
        token ids the loss trains on), the reward and weight it got, and its advantage."""
        reward = self.session_reward
        # a completion left out of the loss is logged as generated, and marked so
        rows, masked = generated_rows(output, self.processing_class.pad_token_id)
        texts = self.processing_class.batch_decode([r.tolist() for r in rows], skip_special_tokens=True)
        seen: dict[tuple[str, str], int] = defaultdict(int)
        process = self.accelerator.process_index
        lines = []
        for i, row in enumerate(inputs):
            key, agent = row["session_key"], row["agent"]
            lines.append(json.dumps({
                "mode": mode, "step": self.state.global_step, "batch": self._rollout_batches, "process": process,
                "num_processes": self.accelerator.num_processes, "session_key": key, "agent": agent,
                "k": seen[key, agent], "completion": texts[i], "reward": reward.last_rewards[i],
                "weight": float(output["adrpo_weights"][i]), "advantage": float(output["advantages"][i]),
                "task_rewarded": reward.last_rewarded[i], **({"loss_masked": True} if masked[i] else {})}))
            seen[key, agent] += 1
        with open(f"{self.args.rollout_log}.{process}.jsonl", "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def _prepare_inputs(self, generation_batch):
        if not (self.model.training and self.args.share_prompt and self.args.steps_per_generation > 1):
            return super()._prepare_inputs(generation_batch)
        # TRL shuffles a generation batch's rows before cutting it into steps_per_generation micro-batches,
        # which spreads each prompt's G completions over all of them: share_prompt would then run every
        # prompt in every micro-batch. Cut in the sampler's order instead (a prompt's G rows are adjacent),
        # so a micro-batch of G rows holds one agent prompt and only its graph is in memory at a time. The
        # accumulated gradient is the same: the 'dapo' and 'grpo' losses do not depend on the split.
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            generated = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = split_tensor_dict(generated, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **multimodal):
        logps, entropies, aux = self._logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                                          compute_entropy, compute_aux_loss, **multimodal)
        if self._ratio_inputs is not None:  # the loss pass's policy forward, the first one _compute_loss makes
            inputs, self._ratio_inputs = self._ratio_inputs, None
            inputs["importance_sampling_ratio"] = self._ratio_from(logps.detach(), inputs)
        return logps, entropies, aux

    def _logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                             compute_aux_loss, **multimodal):
        if (not self.args.share_prompt or compute_aux_loss or any(v is not None for v in multimodal.values())
                or checkpointing(model)):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal)
        with self.accelerator.autocast():
            logps, entropies = through_wrapper(model, lambda: shared_prefix_logps(
                model, input_ids, attention_mask, logits_to_keep, self.temperature, compute_entropy,
                rows_per_pass=self.args.share_prompt_rows))
        return logps, entropies, None

    def _ratio_from(self, logps: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        mask = loss_mask(inputs)
        sampling = inputs["sampling_per_token_logps"]
        mode = self.vllm_importance_sampling_mode
        ratio = importance_ratio(logps, sampling, mask, mode, self.vllm_importance_sampling_clip_min,
                                 self.vllm_importance_sampling_clip_max)
        gather = self.accelerator.gather if self.accelerator.num_processes > 1 else None
        self._ratio_stats["train" if self.model.training else "eval"].add(logps, sampling, mask, ratio, mode, gather)
        return ratio

    def _trains_nothing(self, inputs) -> bool:
        """Whether this micro-batch's loss has a zero gradient: every completion has advantage 0 or no token in
        the loss, and nothing else (KL, entropy bonus, auxiliary loss) enters it. One process only: under DDP a
        skipped backward on the window's last micro-batch would skip the gradients' all-reduce."""
        if not (self.args.skip_tied and self.model.training and self.beta == 0.0
                and self.accelerator.num_processes == 1 and not getattr(self, "_entropy_bonus_enabled", False)
                and not self.aux_loss_enabled and self.loss_type in LINEAR_IN_ADVANTAGE):
            return False
        mask = loss_mask(inputs)
        advantages = inputs["advantages"]
        live = advantages != 0 if advantages.dim() == 2 else (advantages != 0).unsqueeze(1)
        return not bool((live & mask.bool()).any())

    def _compute_loss(self, model, inputs):
        if "adrpo_weights" in inputs:
            inputs = {**inputs, "advantages": weight_advantages(inputs["advantages"], inputs["adrpo_weights"])}
        if self.model.training:
            skip = self._trains_nothing(inputs)
            self._metrics["train"]["loss/skipped_batches"].append(float(skip))
            if skip:
                # A zero that still reaches every trainable weight: each gets a zero gradient, as the full pass
                # would give, so an optimizer with weight decay or moments steps alike when a whole window ties.
                trainable = [p for p in model.parameters() if p.requires_grad]
                return sum(p.sum() for p in trainable) * 0.0
        if not self.ratio_in_loss:
            return super()._compute_loss(model, inputs)
        # TRL's loss reads inputs["importance_sampling_ratio"] after its policy forward, which fills it in
        self._ratio_inputs = inputs = dict(inputs)
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._ratio_inputs = None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        for name, value in self._ratio_stats[mode].pop().items():
            self._metrics[mode][name].append(value)
        super().log(logs, start_time)
