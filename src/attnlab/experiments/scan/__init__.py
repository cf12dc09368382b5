"""SCAN and English–French with Syntactic Attention (Russin et al. 2019): ``experiment`` (config
``experiment: scan``), ``plots`` (``attnlab plot``) and ``recipe`` (``attnlab reproduce russin2019``)."""
