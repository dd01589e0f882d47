"""agentrl-env-web: web tasks in a sandboxed headless Chromium (MiniWoB++ pages and a generated shop).

Importing this package registers `agentrl/WebMiniWob-v0` and `agentrl/WebShop-v0` (the `agentrl.envs`
entry point names this module). Interaction: `agentrl_web.env`; tasks: `agentrl_web.tasks`; the in-sandbox
driver: `agentrl_web.driver`; the shop site: `agentrl_web.shop`; the image: sandboxes/web/.
"""

from agentrl.env import register

register(id="agentrl/WebMiniWob-v0", entry_point="agentrl_web.env:MiniWobEnv")
register(id="agentrl/WebShop-v0", entry_point="agentrl_web.env:ShopEnv")
