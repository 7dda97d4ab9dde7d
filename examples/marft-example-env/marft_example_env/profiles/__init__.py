"""Named profiles of marft-example-env (YAML files; see the marft_envs.profiles entry points)."""
