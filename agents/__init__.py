"""The agent zoo: every network behind the `Agent` interface, selected by name (--agent_name)."""

from agents.base import Agent, AgentOutput
from agents.mlp import MLPAgent
from agents.resnet import ResNetAgent, ResNetLSTMAgent
from agents.simple_conv_net import SimpleConvNetAgent

AGENTS = {cls.__name__: cls for cls in (SimpleConvNetAgent, ResNetAgent, ResNetLSTMAgent, MLPAgent)}


class UnknownAgentError(ValueError):
    """An --agent_name that is not in AGENTS."""


def agent_factory(name):
    """The agent class called `name`, e.g. agent_factory("ResNetAgent")(num_actions=6)."""
    if name not in AGENTS:
        raise UnknownAgentError(f"Unknown agent {name!r}; valid names: {', '.join(sorted(AGENTS))}")
    return AGENTS[name]


__all__ = [
    "AGENTS",
    "Agent",
    "AgentOutput",
    "MLPAgent",
    "ResNetAgent",
    "ResNetLSTMAgent",
    "SimpleConvNetAgent",
    "UnknownAgentError",
    "agent_factory",
]
