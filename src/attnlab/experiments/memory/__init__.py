"""The memory problems with feed-forward attention (Raffel & Ellis 2015): ``experiment`` (config
``experiment: memory``), ``plots`` (``attnlab plot``) and ``recipe`` (``attnlab reproduce raffel2015``)."""
