"""The run loop: the trainer and the session around it (the evaluation before training, signals,
summary), checkpoints, metric files and plots. The episode collector is :mod:`marft_agents.collector`, and
seeding and data parallelism are :mod:`marft_agents.runtime` (both used below the run loop too)."""
