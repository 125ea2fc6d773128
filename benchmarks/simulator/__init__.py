"""The benchmarks' models of a generation engine, moved out of the allocation core (they are not allocation):
:mod:`~benchmarks.simulator.latency` (a decode-step latency model of an engine, with measured presets) and
:mod:`~benchmarks.simulator.simulate` (simulated prompts with latent success rates, and a simulated engine that
drives a collector through the core's event loop).
"""

from benchmarks.simulator.latency import DecodeCost, DecodeEngine, EngineTally, call_cost
from benchmarks.simulator.simulate import (
    SimulatedEngine,
    SimulatedTask,
    phi,
    psi,
    run_streaming_step,
    u_shaped_gammas,
)

__all__ = ["DecodeCost", "DecodeEngine", "EngineTally", "SimulatedEngine", "SimulatedTask", "call_cost", "phi", "psi",
           "run_streaming_step", "u_shaped_gammas"]
