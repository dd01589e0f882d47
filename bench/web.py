"""Benchmark of the web envs' step time against real Chromium in Docker; prints ONE JSON object.

    .venv/bin/python bench/web.py [--episodes 5]

Keys (milliseconds; p50/p95 nearest-rank over all samples):
- `reset_p50_ms`, `reset_p95_ms`: `MiniWobEnv.reset` = a new browser sandbox (container start, driver
  upload, Chromium launch) + opening the task page;
- `step_click_p50_ms`, `step_type_p50_ms`, `step_invalid_p50_ms`: `env.step` of a click on a visible
  element, of a type into an input, and of a click on a missing id (the driver's error path), each one
  request to the in-sandbox driver (one exec of its client) including its 100 ms settle wait and the
  re-rendering of the page;
- `step_screenshot_p50_ms`: a click step with `screenshot=True` (adds a PNG of the viewport);
- `shop_step_p50_ms`: a navigation step in the shop (search results page load);
- `driver_exec_floor_p50_ms`: the `observe` request alone, i.e. the floor of any step;
- `load_avg_1m` at the start: the machine is shared, read every figure next to it.

What this is not: a model benchmark; the actions are scripted.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import harness
from agentrl_web.env import MiniWobEnv, ShopEnv
from agentrl_web.tasks import miniwob_task, shop_task

from agentrl.types import Action, ToolCall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))], 1)


def call(name: str, **arguments: Any) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return (time.perf_counter() - start) * 1000, result


def first(observation: str, kind: str) -> int:
    for line in observation.splitlines():
        if line.startswith("[") and f"] {kind}" in line:
            return int(line[1 : line.index("]")])
    raise RuntimeError(f"no {kind} in {observation!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5)
    harness.add_out_argument(parser, "web")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {
        k: [] for k in ("reset", "click", "type", "invalid", "shot", "shop", "observe")
    }
    load = os.getloadavg()[0]
    env, shot_env, shop_env = MiniWobEnv(), MiniWobEnv(screenshot=True), ShopEnv()
    try:
        for seed in range(args.episodes):
            task = miniwob_task("enter-text", seed, "train")
            ms, (observation, _) = timed(env.reset, options={"task": task})
            samples["reset"].append(ms)
            assert env._browser is not None
            browser = env._browser
            samples["observe"].append(timed(browser.request, "observe")[0])
            samples["invalid"].append(timed(env.step, call("click", element_id=9999))[0])
            field = first(observation, "input")
            samples["type"].append(timed(env.step, call("type", element_id=field, text="abc"))[0])
            samples["click"].append(timed(env.step, call("click", element_id=field))[0])
            observation, _ = shot_env.reset(options={"task": miniwob_task("enter-text", seed, "train")})
            field = first(observation, "input")
            samples["shot"].append(timed(shot_env.step, call("click", element_id=field))[0])
            observation, _ = shop_env.reset(options={"task": shop_task(seed, "train")})
            shop_env.step(call("type", element_id=first(observation, "input"), text="backpack"))
            samples["shop"].append(timed(shop_env.step, call("press", key="Enter"))[0])
    finally:
        for each in (env, shot_env, shop_env):
            each.close()
    report = {
        "episodes": args.episodes,
        "reset_p50_ms": percentile(samples["reset"], 0.5),
        "reset_p95_ms": percentile(samples["reset"], 0.95),
        "step_click_p50_ms": percentile(samples["click"], 0.5),
        "step_type_p50_ms": percentile(samples["type"], 0.5),
        "step_invalid_p50_ms": percentile(samples["invalid"], 0.5),
        "step_screenshot_p50_ms": percentile(samples["shot"], 0.5),
        "shop_step_p50_ms": percentile(samples["shop"], 0.5),
        "driver_exec_floor_p50_ms": percentile(samples["observe"], 0.5),
        "load_avg_1m": round(load, 2),
    }
    baseline = "the driver's exec floor (one observe call), same run"
    harness.emit("web", report, baseline=baseline, out=harness.out_path(args, "web"), argv=argv)


if __name__ == "__main__":
    main()
