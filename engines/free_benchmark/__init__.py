"""free_benchmark: check API calls without a reference run by perturbing their inputs and re-running them
(docs/reference/msprobe-tasks.md §8). Framework-neutral: thresholds and the decision rule, preheat, results and CSV, the engine. The
PyTorch side (perturbations, re-execution, the metric on the device, vjp) is ``engines.adapters.torch.free_benchmark_*``."""
