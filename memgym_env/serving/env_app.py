"""The one app ``memgym serve-env`` serves: the scoring service, plus OpenEnv's routes when asked."""

from __future__ import annotations

import importlib.util
import threading

from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer
from memgym_env.serving.scoring_service import ScoringService


def openenv_installed() -> bool:
    return importlib.util.find_spec("openenv") is not None


def build_app(config: ConstructionConfig, users: list[int] | None = None, max_sessions_per_user: int | None = None,
              openenv: str = "auto", max_concurrent_envs: int = 8, session_pick: str = "first"):
    """``(app, description)``. ``openenv``: "on" (needs memgym[openenv]), "off", or "auto" (on when installed).
    ``session_pick``: which ``max_sessions_per_user`` sessions /score serves (``pick_sessions``: the first, or
    drawn over every period), as the trainer's own scorer picks them.

    The scoring service and the OpenEnv sessions share one embedder and one set of answer models:
    the world and the models load once per process.
    """
    if openenv not in ("auto", "on", "off"):
        raise ValueError(f"openenv must be 'auto', 'on' or 'off', got {openenv!r}")
    if openenv == "on" and not openenv_installed():
        raise ValueError("the OpenEnv environment needs openenv-core: pip install 'memgym[openenv]' "
                         "(or serve only /score with --openenv off)")
    scorer = SessionScorer(config, users, max_sessions_per_user, pick=session_pick)
    lock = threading.Lock()  # one user of the shared models at a time: /score and every OpenEnv session
    service = ScoringService(scorer, lock=lock)
    what = (f"MemoryGym-v0 /score over {len(scorer.session_keys())} sessions "
            f"(answer mode {config.answer_mode}, embedder {config.embedder})")
    if openenv == "off" or not openenv_installed():
        return service.app(), what + ("" if openenv == "off" else "; OpenEnv off: openenv-core is not installed")
    # openenv_env subclasses openenv-core's types as it loads: imported only when OpenEnv is served.
    from memgym_env.serving.openenv_env import openenv_app

    app = openenv_app(config, scorer.cache, scorer.models, lock, max_concurrent_envs)
    taken = {getattr(r, "path", None) for r in app.router.routes}
    # OpenEnv answers /health itself; the scoring routes go in beside its own (its counters at /scoring/health).
    app.router.routes.extend(r for r in service.routes() if r.path not in taken)
    return app, what + (f"; OpenEnv environment at /ws (up to {max_concurrent_envs} sessions; plain-HTTP /step "
                        "answers 409: episodes need the WebSocket)")
