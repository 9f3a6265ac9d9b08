"""llmtriage: classify the symptom, keep the scene, explain with evidence, then change config."""

__version__ = "0.1.0"
