"""A toy fifth system (learn the sum of a vector): the "add a system" walkthrough of
docs/architecture.md, which ``test_experiment_interface.py`` adds below ``attnlab.experiments``."""
