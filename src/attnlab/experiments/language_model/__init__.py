"""Language models with short attention spans (Daniluk et al. 2017): ``experiment`` (config
``experiment: language_model``), ``plots`` (``attnlab plot``) and ``recipe`` (``attnlab reproduce
daniluk2017``)."""
