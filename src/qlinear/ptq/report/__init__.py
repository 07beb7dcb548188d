"""The report of a run and the tools that look into one: held-out evaluation (:mod:`.evaluate`), metrics,
sensitivity, output plots, the deployed artifact's own accuracy, ``report.json`` / ``report.html``
(:mod:`.html`, :mod:`.svg`) and ``qlinear debug`` (:mod:`.debug`)."""
