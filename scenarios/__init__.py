"""rushhour scenarios: the scenario model, its YAML loader and the built-in library."""

from rushhour.scenarios.loader import ScenarioError, json_schema, load_scenario, parse_scenario, resolve_scenario_path
from rushhour.scenarios.model import Scenario

__all__ = ["Scenario", "ScenarioError", "json_schema", "load_scenario", "parse_scenario", "resolve_scenario_path"]
