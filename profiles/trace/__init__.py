"""Reading PyTorch profiler (Kineto / Chrome-trace JSON) traces of a sample run."""
