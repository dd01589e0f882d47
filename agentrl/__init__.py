"""agentrl: train LLM agents with reinforcement learning.

Sandboxed gym-style environments served over HTTP, multi-turn token-in/token-out rollouts, step-level credit
assignment and PPO-style policy updates, with every run recorded in a SQL store. See README.md.
"""

__version__ = "0.1.0"
