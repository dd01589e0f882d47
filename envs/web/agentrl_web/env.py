"""WebEnv: a headless Chromium in a sandbox, seen as text (optionally a screenshot), driven by tool calls.

What this is: two envs on one protocol. `MiniWobEnv` (`agentrl/WebMiniWob-v0`) opens a MiniWoB++ task page
of the `miniwob` package with a seed; the reward is the page's own (`WOB_RAW_REWARD_GLOBAL`, read after every
action; MiniWoB's -1..1 is clipped to 0..1, and its time penalty is switched off because a CPU-bound model
needs seconds per step). `ShopEnv` (`agentrl/WebShop-v0`) opens the generated shop site of
`agentrl_web.shop`; the episode ends when something is bought, scored by `shop.purchase_reward`.

Tools: click(element_id), type(element_id, text), press(key), scroll(direction), select(element_id, option)
and stop(). Only the first tool call of a turn runs. A missing element id, a malformed call or a turn with
no call gets an error observation and `info["invalid"] = True`; the page is unchanged.

Observation: the task's instruction line, then one line per visible element that has text or can be acted
on, `[id] kind "text"`, ids stable while the element lives. With `screenshot=True`, `info["screenshot"]`
holds a base64 PNG of the viewport after each reset and step. State key: `text_state_key` of (task id,
rendering): the rendering is the page state the agent can see.

Fork: "replay". The state of a browser episode lives in Chromium's memory (DOM, JS heap, history), not in
the sandbox's files, so copying the container's workdir (what sandbox fork does) cannot copy it. A fork is
a fresh env (`spawn`) reset on the same task and stepped with the episode's actions: both page kinds are
seeded (MiniWoB's `Math.seedrandom(seed)` with its timer off, the shop generated from its seed) and element
ids are numbered in page order, so the replay reaches the same page; `Env.fork` checks that it ends in the
same observation and state key and raises `EnvError` if not. It costs a browser start plus one action per
turn taken.

What this is not: the in-sandbox driver (`agentrl_web.driver`) or the task lists (`agentrl_web.tasks`).
Sandbox or driver failures raise (`SandboxError`, `EnvError`); they are never a reward of 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from agentrl.env import Env, StepResult, render_tool_call, text_state_key, tool_spec
from agentrl.errors import EnvError
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import acquire_sandbox, discard_sandbox
from agentrl.types import Action, ToolCall
from agentrl_web import shop
from agentrl_web.browser import BrowserSession, web_sandbox_config
from agentrl_web.scripted import miniwob_policy, shop_policy
from agentrl_web.tasks import MINIWOB_TASKS, draw_task

ELEMENT = {"type": "integer", "description": "the number in brackets before the element, e.g. 3 for [3]"}
TOOLS = (
    tool_spec("click", "Click an element of the page", {"element_id": ELEMENT}),
    tool_spec(
        "type",
        "Replace the text of an input field",
        {"element_id": ELEMENT, "text": {"type": "string", "description": "the text to enter"}},
    ),
    tool_spec(
        "press", "Press a key, e.g. Enter or Tab", {"key": {"type": "string", "description": "key name"}}
    ),
    tool_spec("scroll", "Scroll the page", {"direction": {"type": "string", "enum": ["up", "down"]}}),
    tool_spec(
        "select",
        "Choose an option of a select element",
        {"element_id": ELEMENT, "option": {"type": "string", "description": "the option's text"}},
    ),
    tool_spec("stop", "Give up or declare the task done; this ends the episode", {}),
)
ARGUMENTS = {
    "click": ("element_id",),
    "type": ("element_id", "text"),
    "press": ("key",),
    "scroll": ("direction",),
    "select": ("element_id", "option"),
    "stop": (),
}
FORMAT_HELP = "Call exactly one tool per turn, e.g. " + render_tool_call("click", {"element_id": 3})


MINIWOB_HEADER = "Do what the first line of the page asks, using the tools. The page:"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def miniwob_examples() -> tuple[dict[str, Any], ...]:
    """Two solved episodes on made-up pages (no seed renders these words): a one-click task and a
    type-then-submit task, ending on the assistant's action, as the calc env's examples do."""
    field = '[4] text "Enter "Kim" into the text field and press Submit."\n[6] input text value="{}"\n'
    return (
        {
            "role": "user",
            "content": f'{MINIWOB_HEADER}\n[3] text "Click on the "Ok" button."\n[5] button "Cancel"\n'
            '[6] button "Ok"',
        },
        _call("click", element_id=6),
        {"role": "user", "content": f'{MINIWOB_HEADER}\n{field.format("")}[7] button "Submit"'},
        _call("type", element_id=6, text="Kim"),
        {"role": "tool", "content": f'{MINIWOB_HEADER}\n{field.format("Kim")}[7] button "Submit"'},
        _call("click", element_id=7),
    )


def shop_examples() -> tuple[dict[str, Any], ...]:
    """One solved purchase on a made-up shop page sequence: search, open the match, choose, buy."""
    head = (
        "Buy a lamp that is dimmable, in gold, priced under $40.00. Search, open a product, choose its "
        "options, then click Buy Now. The page:"
    )
    return (
        {
            "role": "user",
            "content": f'{head}\n[4] input text value="" placeholder="search"\n[5] button "Search"',
        },
        _call("type", element_id=4, text="dimmable lamp"),
        {
            "role": "tool",
            "content": f'{head}\n[4] input text value="dimmable lamp" placeholder="search"\n'
            '[5] button "Search"',
        },
        _call("click", element_id=5),
        {
            "role": "tool",
            "content": f'{head}\n[3] text "2 results for dimmable lamp (page 1)"\n'
            '[5] link "Lumo Dimmable Lamp"\n[6] text "$35.00"\n[7] link "Lumo Desk Lamp"\n[8] text "$52.00"',
        },
        _call("click", element_id=5),
        {
            "role": "tool",
            "content": f'{head}\n[3] text "Lumo Dimmable Lamp"\n[4] text "Price: $35.00"\n'
            '[5] text "Features: dimmable"\n[7] label "color"\n'
            '[8] select value="white" options=["white","gold"]\n'
            '[9] button "Buy Now"',
        },
        _call("select", element_id=8, option="gold"),
        {
            "role": "tool",
            "content": f'{head}\n[3] text "Lumo Dimmable Lamp"\n[4] text "Price: $35.00"\n'
            '[5] text "Features: dimmable"\n[7] label "color"\n'
            '[8] select value="gold" options=["white","gold"]\n'
            '[9] button "Buy Now"',
        },
        _call("click", element_id=9),
    )


class _Outcome(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    info: dict[str, Any]


def parse_call(call: ToolCall) -> tuple[dict[str, Any] | None, str]:
    """The driver request for `call`, or None and what is wrong with it."""
    expected = ARGUMENTS.get(call.name)
    if expected is None:
        return None, f"unknown tool {call.name!r}; the tools are {', '.join(ARGUMENTS)}"
    if set(call.arguments) != set(expected):
        return None, f"{call.name} takes {list(expected) or 'no arguments'}; got {sorted(call.arguments)}"
    request: dict[str, Any] = {"op": call.name}
    for key in expected:
        value = call.arguments[key]
        if key == "element_id":
            if isinstance(value, str) and value.strip().strip("[]").isdigit():
                value = int(value.strip().strip("[]"))
            if not isinstance(value, int) or isinstance(value, bool):
                return None, f"element_id must be a number like 3 (from [3]), got {value!r}"
            request["id"] = value
        elif not isinstance(value, str):
            return None, f"{key} must be a string, got {value!r}"
        else:
            request[key] = value
    return request, ""


def render(header: str, reply: Mapping[str, Any]) -> str:
    return f"{header}\n{reply['text']}" if reply.get("text") else f"{header}\n(the page is empty)"


class WebEnv(Env):
    """The shared browser protocol; subclasses say how to open a task, its header and its reward."""

    tools = TOOLS
    fork_capability = "replay"

    def __init__(
        self,
        sandbox: SandboxConfig | None = None,
        max_steps: int = 8,
        screenshot: bool = False,
        pool_size: int = 0,
        sandbox_labels: Mapping[str, str] | None = None,
    ) -> None:
        """pool_size: warm browser sandboxes kept in the process-wide pool (0: one started per episode)."""
        super().__init__()
        self.sandbox_config = sandbox or web_sandbox_config()
        self.sandbox_labels = {"agentrl.env": self.env_id, **(sandbox_labels or {})}
        self.max_steps = max_steps
        self.screenshot = screenshot
        self.pool_size = pool_size
        self._sandbox: DockerSandbox | None = None
        self._browser: BrowserSession | None = None
        self._task: dict[str, Any] | None = None
        self._steps = 0

    env_id = "agentrl/Web-v0"
    family = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._close_sandbox()
        task = (options or {}).get("task")
        self._task = self.validate_task(task) if task is not None else draw_task(self.family, self.np_random)
        self._steps = 0
        self._sandbox = acquire_sandbox(
            self.sandbox_config, self.sandbox_labels, self.pool_size, self._task["id"]
        )
        self._browser = BrowserSession(self._sandbox)
        reply = self._browser.request(**self.open_request(self._task), screenshot=self.screenshot)
        if not reply.get("ok"):
            raise EnvError(f"could not open task {self._task['id']!r}: {reply.get('error')}")
        self._last = reply
        observation = render(self.header(self._task), reply)
        return observation, self._info(observation, reply)

    def step(self, action: Action) -> StepResult:
        task = self._task
        assert task is not None  # Env's guard: step() runs only after a successful reset()
        self._steps += 1
        outcome = self._dispatch(action, task)
        truncated = not outcome.terminated and self._steps >= self.max_steps
        info = {**self._info(outcome.observation, self._last), "invalid": False, **outcome.info}
        return StepResult(outcome.observation, outcome.reward, outcome.terminated, truncated, info)

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    def spawn(self) -> WebEnv:
        """A fresh env of this configuration (what a fork replays the episode into)."""
        return type(self)(
            sandbox=self.sandbox_config,
            max_steps=self.max_steps,
            screenshot=self.screenshot,
            pool_size=self.pool_size,
            sandbox_labels=self.sandbox_labels,
        )

    # what subclasses define
    def validate_task(self, task: Any) -> dict[str, Any]:
        raise NotImplementedError

    def open_request(self, task: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def header(self, task: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def score(self, task: Mapping[str, Any], reply: Mapping[str, Any]) -> tuple[float, bool]:
        """(reward, episode over) after an action."""
        raise NotImplementedError

    def _dispatch(self, action: Action, task: Mapping[str, Any]) -> _Outcome:
        header = self.header(task)
        if not action.tool_calls:
            problem = action.parse_error or "your turn has no tool call"
            return self._invalid(f"Error: {problem}. {FORMAT_HELP}")
        request, problem = parse_call(action.tool_calls[0])
        if request is None:
            return self._invalid(f"Error: {problem}. {FORMAT_HELP}")
        if request["op"] == "stop":
            reward, _ = self.score(task, self._last)
            return _Outcome(render(header, self._last), reward, True, {"stopped": True})
        assert self._browser is not None
        reply = self._browser.request(**request, screenshot=self.screenshot)
        if not reply.get("ok"):
            return self._invalid(f"Error: {reply.get('error')}. Use an id in brackets from the page below.")
        self._last = reply
        reward, over = self.score(task, reply)
        return _Outcome(render(header, reply), reward, over, {"success": over and reward >= 1.0})

    def _invalid(self, message: str) -> _Outcome:
        assert self._task is not None
        return _Outcome(
            f"{message}\n{render(self.header(self._task), self._last)}", 0.0, False, {"invalid": True}
        )

    def _info(self, observation: str, reply: Mapping[str, Any]) -> dict[str, Any]:
        assert self._task is not None
        info: dict[str, Any] = {
            "state_key": text_state_key(f"{self._task['id']}\0{reply.get('text', '')}"),
            "task_id": self._task["id"],
        }
        if self.screenshot and reply.get("screenshot"):
            info["screenshot"] = reply["screenshot"]
        return info

    def _close_sandbox(self) -> None:
        sandbox, self._sandbox, self._browser = self._sandbox, None, None
        if sandbox is not None:
            discard_sandbox(sandbox, self.sandbox_config, self.sandbox_labels, self.pool_size)


def _require(task: Any, fields: Mapping[str, type], suite: str) -> dict[str, Any]:
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    for key, kind in fields.items():
        if not isinstance(task.get(key), kind) or isinstance(task.get(key), bool):
            raise EnvError(f"{suite} task is missing {key!r} ({kind.__name__}); see tasks/{suite}/*.jsonl")
    return dict(task)


class MiniWobEnv(WebEnv):
    """MiniWoB++ task pages; see the module docstring."""

    env_id = "agentrl/WebMiniWob-v0"
    family = "miniwob"
    examples = miniwob_examples()
    scripted_policy = staticmethod(miniwob_policy)  # demonstrations (agentrl demos)

    def validate_task(self, task: Any) -> dict[str, Any]:
        record = _require(task, {"id": str, "task": str, "seed": int}, "web-miniwob")
        if record["task"] not in MINIWOB_TASKS:
            raise EnvError(f"unknown MiniWoB task {record['task']!r}; curated: {', '.join(MINIWOB_TASKS)}")
        return record

    def open_request(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return {"op": "open_miniwob", "task": task["task"], "seed": task["seed"]}

    def header(self, task: Mapping[str, Any]) -> str:
        return MINIWOB_HEADER

    def score(self, task: Mapping[str, Any], reply: Mapping[str, Any]) -> tuple[float, bool]:
        state = reply.get("miniwob") or {}
        return max(0.0, min(1.0, float(state.get("raw_reward") or 0.0))), bool(state.get("done"))


class ShopEnv(WebEnv):
    """The generated shop; see the module docstring and `agentrl_web.shop`."""

    env_id = "agentrl/WebShop-v0"
    family = "shop"
    examples = shop_examples()
    scripted_policy = staticmethod(shop_policy)  # demonstrations (agentrl demos)

    def __init__(self, max_steps: int = 12, **kwargs: Any) -> None:
        super().__init__(max_steps=max_steps, **kwargs)

    def validate_task(self, task: Any) -> dict[str, Any]:
        return _require(task, {"id": str, "seed": int}, "web-shop")

    def open_request(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return {"op": "open_shop", "seed": task["seed"]}

    def header(self, task: Mapping[str, Any]) -> str:
        _, goal = shop.make_shop(int(task["seed"]))
        return (
            f"{goal.instruction()} Search, open a product, choose its options, then click Buy Now. The page:"
        )

    def score(self, task: Mapping[str, Any], reply: Mapping[str, Any]) -> tuple[float, bool]:
        purchase = reply.get("purchase")
        return shop.purchase_reward(int(task["seed"]), purchase), purchase is not None
