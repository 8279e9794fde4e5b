"""The workload profiler: what a model description or a traced run needs (FLOPs, bytes, memory)."""
