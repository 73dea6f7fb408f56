"""badc statistics, decisions, campaign runner and reports.

The statistics core (events, bounds, decide, ...) imports numpy and scipy only, never an engine.
"""
