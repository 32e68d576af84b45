"""MemoryGym-v0 as an OpenEnv environment (``pip install 'memgym[openenv]'``; ``memgym serve-env``).

OpenEnv serves Gymnasium-style ``reset``/``step`` over a WebSocket (``/ws``), one environment per
connection (plain-HTTP ``POST /step`` answers 409: OpenEnv keeps no episode between HTTP requests);
TRL, Unsloth, torchforge and verifiers' ``openenv`` taskset speak it. The action is
the four agents' raw outputs; the observation is MemoryGym-v0's, plus the env's ``info`` in a
field of its own (OpenEnv drops ``metadata`` on the way to the client, and the per-agent rewards,
attribution weights and answered questions live in ``info``).

Every connection gets its own ``MemoryGymEnv`` (its own episode and memory); all of them share
the server's episodes, embedder cache and answer models, and a lock lets one of them use the
models at a time, so concurrent sessions are safe and cost one model load.
"""

from __future__ import annotations

import threading
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field
from starlette.routing import Route

from membuilder.memory import EmbeddingCache
from membuilder.plumbing.http import error_response
from memgym_env.construction.answers import ScoringModels
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.env import MemoryGymEnv


class MemoryAction(Action):
    """The four memory agents' raw outputs for one session; any string is legal (an output that
    does not parse makes that agent invalid, earning it 0)."""

    core: str = Field(description='Core agent: {"operation": "APPEND"|"REPLACE"|"REWRITE", ...}')
    episodic: str = Field(description='Episodic agent: {"operations": [{"action": ..., ...}]}')
    semantic: str = Field(description='Semantic agent: {"operations": [{"action": ..., ...}]}')
    procedural: str = Field(description='Procedural agent: {"operations": [{"action": ..., ...}]}')


class MemoryObservation(Observation):
    session: str = Field(default="", description="the session to remember, one 'speaker: text' line per message")
    session_time: str = Field(default="")
    session_index: int = Field(default=0)
    num_sessions: int = Field(default=0)
    core: str = Field(default="", description="the Core block")
    core_usage: float = Field(default=0.0, description="Core fill in percent")
    episodic: list[str] = Field(default_factory=list, description="top own-type entries for this session")
    semantic: list[str] = Field(default_factory=list)
    procedural: list[str] = Field(default_factory=list)
    info: dict[str, Any] = Field(default_factory=dict, description="MemoryGym-v0's info of this reset or step")


class MemoryGymState(State):
    conversation: str | None = None
    session_index: int = 0
    num_sessions: int = 0


class MemoryGymOpenEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, config: ConstructionConfig, cache: EmbeddingCache, models: ScoringModels,
                 lock: threading.Lock):
        super().__init__()
        self.env = MemoryGymEnv(config)
        self.env.use_scoring_models(cache, models)
        self.lock = lock
        self._state = MemoryGymState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, episode: int | None = None,
              **kwargs: Any) -> MemoryObservation:
        """``episode`` picks a user (as ``options={"episode": i}`` in Gymnasium); else the seed does."""
        with self.lock:  # reset builds the expert's snapshots with the shared embedder
            obs, info = self.env.reset(seed=seed, options=None if episode is None else {"episode": int(episode)})
        self._state = MemoryGymState(episode_id=episode_id, conversation=info["conversation"],
                                     num_sessions=info["num_sessions"])
        return _observation(obs, info, reward=None, done=False)

    def step(self, action: MemoryAction, timeout_s: float | None = None, **kwargs: Any) -> MemoryObservation:
        with self.lock:
            obs, reward, terminated, truncated, info = self.env.step(
                {"core": action.core, "episodic": action.episodic, "semantic": action.semantic,
                 "procedural": action.procedural})
        self._state.step_count += 1
        self._state.session_index = int(obs["session_index"])
        return _observation(obs, info, reward=float(reward), done=bool(terminated or truncated))

    @property
    def state(self) -> MemoryGymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="MemoryGym-v0",
            description="Build an assistant's long-term memory one conversation session per step: the action is "
                        "four memory agents' JSON outputs (core, episodic, semantic, procedural); the reward is how "
                        "well the memory then answers questions about the session.",
            version="0")


def _observation(obs: dict[str, Any], info: dict[str, Any], reward: float | None, done: bool) -> MemoryObservation:
    return MemoryObservation(
        session=obs["session"], session_time=obs["session_time"], session_index=int(obs["session_index"]),
        num_sessions=int(obs["num_sessions"]), core=obs["core"], core_usage=float(obs["core_usage"]),
        episodic=list(obs["episodic"]), semantic=list(obs["semantic"]), procedural=list(obs["procedural"]),
        info=info, reward=reward, done=done)


STEP_NEEDS_WEBSOCKET = (
    "POST /step over plain HTTP has no episode to step: OpenEnv builds a fresh environment for every HTTP "
    "request, so the episode a POST /reset began is gone by the next request. Run episodes over the WebSocket "
    "at /ws, one episode per connection (MemoryGymClient(base_url=...).sync() or any OpenEnv EnvClient does); "
    "POST /reset over HTTP only shows a first observation.")


def openenv_app(config: ConstructionConfig, cache: EmbeddingCache, models: ScoringModels, lock: threading.Lock,
                max_concurrent_envs: int = 8):
    """OpenEnv's FastAPI app over MemoryGym-v0: ``/ws`` (sessions), ``/reset``, ``/schema``, ``/health``;
    ``POST /step`` over plain HTTP answers 409 with ``STEP_NEEDS_WEBSOCKET`` instead of OpenEnv's 500."""
    if max_concurrent_envs < 1:
        raise ValueError(f"max_concurrent_envs must be >= 1, got {max_concurrent_envs}")
    app = create_fastapi_app(lambda: MemoryGymOpenEnv(config, cache, models, lock), MemoryAction,
                             MemoryObservation, max_concurrent_envs=max_concurrent_envs)
    # OpenEnv's HTTP /step steps a new env that was never reset (a 500 "call reset() before step()"):
    # the route is replaced, not patched, so the answer is the same whatever the action holds.
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/step"]
    app.router.routes.append(Route("/step", _step_needs_websocket, methods=["POST"]))
    return app


async def _step_needs_websocket(request):
    return error_response(409, STEP_NEEDS_WEBSOCKET)


class MemoryGymClient(EnvClient[MemoryAction, MemoryObservation, MemoryGymState]):
    """A typed OpenEnv client: ``MemoryGymClient(base_url="http://127.0.0.1:8100").sync()`` then
    ``reset(seed=0)`` and ``step(MemoryAction(...))``; each result's ``observation.info`` holds the env's info."""

    def _step_payload(self, action: MemoryAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MemoryObservation]:
        obs = MemoryObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                done=payload.get("done", False))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> MemoryGymState:
        return MemoryGymState(**payload)
