"""The engine: plain Python between the API and the profiler / knowledge (no Flask)."""
