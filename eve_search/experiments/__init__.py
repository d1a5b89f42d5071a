"""The paper's experiments: the training protocols (MNIST-format, LoRA), the ranking study, the
proxy audit and the synthetic benchmarks."""
