"""monitor: a training-state monitor (activations, weight gradients, optimizer state, loss, alerts).

Framework-neutral parts live here: metric definitions, alert rules, the metrics store layout, the reader API
(``engines.monitor.reader.open_metrics``), the CSV and TensorBoard writers and the dynamic-config watcher. The
torch hooks are ``engines.adapters.torch.monitor*``.
"""
