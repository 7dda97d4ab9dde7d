"""The run loop: the trainer and the session around it (baseline evaluation, signals, summary),
the episode collector, checkpoints, metric files and plots, data parallelism and seeding."""
